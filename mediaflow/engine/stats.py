"""Emit-to-start latency per node, summarised into ``work_latency`` events."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (``q`` in 0..100)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = max(1, round(q / 100 * len(sorted_values) + 0.5 - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass(frozen=True)
class LatencySummary:
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    def to_json(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "max_ms": round(self.max_ms, 3),
        }


def summarise(latencies_s: Sequence[float]) -> LatencySummary:
    ordered = sorted(latencies_s)
    return LatencySummary(
        count=len(ordered),
        p50_ms=percentile(ordered, 50) * 1000,
        p99_ms=percentile(ordered, 99) * 1000,
        max_ms=ordered[-1] * 1000,
    )


class LatencyWindow:
    """Latencies recorded since the last :meth:`take`, at most ``cap`` per node
    (the newest win: the summary describes recent behaviour)."""

    def __init__(self, cap: int = 8192) -> None:
        self._cap = cap
        self._samples: dict[str, deque[float]] = {}
        self._observers: list[Callable[[str, float], None]] = []
        self.totals: dict[str, int] = {}

    def add_observer(self, callback: Callable[[str, float], None]) -> None:
        """Also call ``callback(node, seconds)`` for every latency recorded (metrics)."""
        self._observers.append(callback)

    def record(self, node: str, latency_s: float) -> None:
        samples = self._samples.get(node)
        if samples is None:
            samples = self._samples[node] = deque(maxlen=self._cap)
        samples.append(latency_s)
        self.totals[node] = self.totals.get(node, 0) + 1
        for observer in self._observers:
            observer(node, latency_s)

    def take(self) -> dict[str, LatencySummary]:
        """Summaries per node since the previous call; clears the window."""
        out = {node: summarise(s) for node, s in self._samples.items() if s}
        for samples in self._samples.values():
            samples.clear()
        return out
