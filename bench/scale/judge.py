"""Did a scale run keep up? Two looks at the running flow, a verdict per check.

A :class:`Snapshot` is one look from outside, as an operator would take it: the
flow's API (every source port's ``seq``: how many items it has emitted; every
node's ``ready`` backlog) and one scrape of ``/metrics`` (items each node started,
the emit → start latency sums, capture losses, transcripts), plus the process's CPU
time and RSS. :func:`judge` compares the look at the start of the measured window
with the one at its end; it is pure, so the rules are tested without a flow.

A run is *sustained* when, over the window:

- every source emitted at least ``RATE_FLOOR`` of its nominal items per second (a
  camera that cannot encode a frame in time skips it at the capture edge, and a
  paced virtual source that falls behind real time emits fewer): JPEGs at 30/s,
  segments every 2 s, audio chunks every 100 ms;
- nothing was lost at capture (``mediaflow_capture_losses`` did not move);
- every consumer started at least ``RATE_FLOOR`` of the items its inputs produced,
  its mean emit → start latency stayed under ``LATENCY_BOUND_S`` and its ready
  backlog at the end is under ``BACKLOG_BOUND_S`` worth of items: speech and the
  recorder keep up in real time, not eventually;
- the recogniser produced transcripts, and the log has no ``ERROR`` line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.scale.flow import ScaleFlow

RATE_FLOOR = 0.97
LATENCY_BOUND_S = 0.5
BACKLOG_BOUND_S = 1.0
BACKLOG_SLACK = 3  # items: a batch being claimed as the look is taken


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


def _worst(ratios: Mapping[str, float]) -> tuple[str, float]:
    name = min(ratios, key=lambda key: ratios[key])
    return name, ratios[name]


def judge(flow: ScaleFlow, a: Snapshot, b: Snapshot, errors: int = 0) -> list[Check]:
    """The checks of the window from ``a`` to ``b`` (module doc)."""
    span = b.t - a.t
    checks: list[Check] = []
    # One item of slack: a window holds 22.5 segments of 2 s, and sees 22 or 23.
    emitted = {
        f"{node}.{port}": (
            b.emitted.get(f"{node}.{port}", 0) - a.emitted.get(f"{node}.{port}", 0) + 1
        )
        / (rate * span)
        for node, ports in flow.sources().items()
        for port, rate in ports.items()
    }
    if emitted:
        worst, ratio = _worst(emitted)
        checks.append(
            Check(
                "sources in real time",
                ratio >= RATE_FLOOR,
                f"lowest {worst} at {ratio:.1%} of nominal, one item of slack "
                f"(floor {RATE_FLOOR:.0%})",
            )
        )
    lost = {key: b.losses.get(key, 0) - a.losses.get(key, 0) for key in b.losses}
    lost_total = sum(lost.values())
    where = ", ".join(f"{key} {n}" for key, n in lost.items() if n) or "none"
    checks.append(Check("nothing lost at capture", lost_total == 0, f"{lost_total} ({where})"))
    consumers = flow.consumers()
    if consumers:
        kept = {
            node: (b.started.get(node, 0) - a.started.get(node, 0)) / (rate * span)
            for node, rate in consumers.items()
        }
        worst, ratio = _worst(kept)
        checks.append(
            Check(
                "consumers keep up",
                ratio >= RATE_FLOOR,
                f"lowest {worst} started {ratio:.1%} of its input (floor {RATE_FLOOR:.0%})",
            )
        )
        means = {node: _mean_latency(a, b, node) for node in consumers}
        slowest = max(means, key=lambda node: means[node])
        checks.append(
            Check(
                "emit -> start latency",
                means[slowest] <= LATENCY_BOUND_S,
                f"highest mean {slowest} {means[slowest] * 1000:.0f} ms "
                f"(bound {LATENCY_BOUND_S * 1000:.0f} ms)",
            )
        )
        over = {
            node: b.ready.get(node, 0)
            for node, rate in consumers.items()
            if b.ready.get(node, 0) > rate * BACKLOG_BOUND_S + BACKLOG_SLACK
        }
        deepest = max(consumers, key=lambda node: b.ready.get(node, 0))
        checks.append(
            Check(
                "backlog at the end",
                not over,
                f"deepest {deepest} {b.ready.get(deepest, 0)} items waiting "
                f"(bound {BACKLOG_BOUND_S:g} s of its input)",
            )
        )
    if flow.microphones:
        heard = b.transcripts - a.transcripts
        checks.append(Check("speech heard", heard > 0, f"{heard} transcript events"))
    checks.append(Check("no errors logged", errors == 0, f"{errors} ERROR lines"))
    return checks


def _mean_latency(a: Snapshot, b: Snapshot, node: str) -> float:
    count_a, sum_a = a.latency.get(node, (0, 0.0))
    count_b, sum_b = b.latency.get(node, (0, 0.0))
    count = count_b - count_a
    return (sum_b - sum_a) / count if count > 0 else float("inf")


def sustained(checks: list[Check]) -> bool:
    return all(check.ok for check in checks)


def cores(a: Snapshot, b: Snapshot) -> float:
    """CPU the process used over the window, in cores."""
    return (b.cpu_s - a.cpu_s) / (b.t - a.t)
