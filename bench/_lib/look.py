"""One look at a running flow from outside, as an operator would take it: the
flow's API (every source port's ``seq``: how many items it has emitted; every
node's ``ready`` backlog) and one scrape of ``/metrics`` (items each node started,
the emit → start latency sums, capture losses, transcripts), plus the process's CPU
time and RSS; and a judge's verdict on one check. The scale and IP camera benches
compare two looks (``bench.scale.judge``, ``bench.ipcam.judge``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Snapshot:
    """One look at the running flow; ``t`` is monotonic seconds."""

    t: float
    cpu_s: float
    rss: int
    emitted: dict[str, int]  # "node.port" -> items emitted so far (the port's seq)
    ready: dict[str, int]  # node -> items waiting to start
    started: dict[str, int]  # node -> items started (metrics)
    latency: dict[str, tuple[int, float]]  # node -> (count, sum of seconds) emit -> start
    losses: dict[str, int] = field(default_factory=dict)  # labels -> frames/chunks lost
    transcripts: int = 0


def _labels(key: str) -> dict[str, str]:
    inside = key.partition("{")[2].rstrip("}")
    pairs = (part.split("=", 1) for part in inside.split(",") if "=" in part)
    return {name: value.strip('"') for name, value in pairs}


def snapshot(
    t: float, cpu_s: float, rss: int, flow_body: Mapping[str, Any], metrics: Mapping[str, float]
) -> Snapshot:
    """A :class:`Snapshot` from ``GET /api/flows/{flow}`` and a parsed ``/metrics``."""
    emitted: dict[str, int] = {}
    ready: dict[str, int] = {}
    for node in flow_body.get("nodes", []):
        for port, out in (node.get("outputs") or {}).items():
            emitted[f"{node['id']}.{port}"] = int(out.get("seq") or 0)
        ready[node["id"]] = int((node.get("backlog") or {}).get("ready") or 0)
    started: dict[str, int] = {}
    counts: dict[str, int] = {}
    sums: dict[str, float] = {}
    losses: dict[str, int] = {}
    transcripts = 0
    for key, value in metrics.items():
        name = key.partition("{")[0]
        labels = _labels(key)
        node = labels.get("node", "")
        if name == "mediaflow_node_items_started_total":
            started[node] = int(value)
        elif name == "mediaflow_emit_to_start_seconds_count":
            counts[node] = int(value)
        elif name == "mediaflow_emit_to_start_seconds_sum":
            sums[node] = value
        elif name in ("mediaflow_capture_losses", "mediaflow_capture_losses_total"):
            losses[f"{node}/{labels.get('media', '')}/{labels.get('stage', '')}"] = int(value)
        elif name == "mediaflow_events_total" and labels.get("type") == "transcript":
            transcripts = int(value)
    latency = {node: (count, sums.get(node, 0.0)) for node, count in counts.items()}
    return Snapshot(t, cpu_s, rss, emitted, ready, started, latency, losses, transcripts)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"
