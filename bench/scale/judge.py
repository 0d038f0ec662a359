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

from bench._lib.look import Check, Snapshot
from bench.scale.flow import ScaleFlow

RATE_FLOOR = 0.97
LATENCY_BOUND_S = 0.5
BACKLOG_BOUND_S = 1.0
BACKLOG_SLACK = 3  # items: a batch being claimed as the look is taken


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
