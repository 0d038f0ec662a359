"""What one run measured, from its looks and marks, and the verdict over the runs.

- **Live rate**: items the sources put in the forwarded streams a second over the
  live window (the API's ``seq`` of each source port).
- **Catch-up**: from the last look before the forwarded count moved after the
  link came back (``resume``) to the first look where what waits on the box (items
  emitted minus items forwarded) is back to the most it was while live (``caught
  up``); the rate is the items forwarded in between over that time, and its
  multiple of the live rate the headline (target: at least :data:`TARGET`). A
  catch-up that outlasts the capture is flagged (its rate is then a drain's).
- **Live latency**: per look, now minus ``captured_at`` of the camera's newest
  value in the shared queue; p50/p95 over the live window and over the catch-up
  (looks after the first forward only: before it, the value is from before the
  outage).
- **CPU**: the box's CPU over the live window as a share of one core, against
  the same flow without forwarding over a window as long; the difference per
  camera (the flow has one, with its microphone).
- **RSS**: at the end of the live window, the most during the outage, at its end
  and when caught up; its growth over the outage against the same box's growth
  over as long a window at the same age with the link up all along (the steady
  peer, :func:`~bench.edge.run.steady_run`): the difference is what the outage
  costs, the peer's own growth what the box grows by anyway.
- **Every item arrived**: each source's ``seq`` has no gap, each forwarded stream
  holds as many items as its source emitted, and the box exited 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from bench._lib.common import percentile
from bench.edge.run import ForwardRun, SteadyRun, Window
from bench.edge.watch import Look

TARGET = 5.0
MIB = 1 << 20

Figures = dict[str, Any]


def _nearest(looks: Sequence[Look], t: float) -> int:
    """The index of the look taken nearest ``t``."""
    return min(range(len(looks)), key=lambda i: abs(looks[i].t - t))


def _waiting(look: Look) -> int | None:
    if look.emitted is None or look.forwarded is None:
        return None
    return look.emitted - look.forwarded


def _quantiles(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    ordered = sorted(values)
    return percentile(ordered, 50), percentile(ordered, 95)


def catch_up(run: ForwardRun) -> tuple[int, int] | None:
    """Indexes of the looks at resume and when caught up (module doc), or None."""
    looks, marks = run.looks, run.marks
    live = [w for look in looks if marks["live"] <= look.t <= marks["live_end"]
            if (w := _waiting(look)) is not None]  # fmt: skip
    standing = max(live, default=0)
    after = [i for i, look in enumerate(looks) if look.t >= marks["up"]]
    if not after:
        return None
    before = after[0] - 1 if after[0] > 0 else after[0]
    counted = looks[before].forwarded
    resume = None
    for i in after:
        now = looks[i].forwarded
        if now is not None and counted is not None and now > counted:
            resume = i - 1
            break
        if now is not None:
            counted = now
    if resume is None:
        return None
    for i in range(resume + 1, len(looks)):
        waiting = _waiting(looks[i])
        if waiting is not None and waiting <= standing:
            return resume, i
    return None


def figures(
    run: ForwardRun, plain: Window, steady: SteadyRun | None = None, cameras: int = 1
) -> Figures:
    """The numbers of one run (module doc); None where they could not be had."""
    looks, marks = run.looks, run.marks
    first, last = _nearest(looks, marks["live"]), _nearest(looks, marks["live_end"])
    start, end = looks[first], looks[last]
    live_rate = None
    if start.emitted is not None and end.emitted is not None and end.t > start.t:
        live_rate = (end.emitted - start.emitted) / (end.t - start.t)
    live_ages = [look.age_s for look in looks[first : last + 1]]
    live_p50, live_p95 = _quantiles([a for a in live_ages if a is not None])
    found = catch_up(run)
    out: Figures = {"live_rate": live_rate, "live_age_p50": live_p50, "live_age_p95": live_p95}
    out.update(_catch_up_figures(run, found, live_rate))
    out.update(_memory(run, found))
    out.update(_steady_memory(steady, out["rss_growth_mib"]))
    out.update(_cpu(run.live, plain, cameras))
    out.update(_arrival(run))
    out.update(_ratios(out))
    return out


def _catch_up_figures(
    run: ForwardRun, found: tuple[int, int] | None, live_rate: float | None
) -> Figures:
    if found is None:
        return {"catch_up_rate": None, "catch_up_s": None, "resume_lag_s": None,
                "backlog_at_return": None, "catch_up_age_p50": None,
                "catch_up_age_p95": None, "outlasted_capture": None}  # fmt: skip
    looks, marks = run.looks, run.marks
    resume, done = looks[found[0]], looks[found[1]]
    assert resume.forwarded is not None and done.forwarded is not None
    seconds = done.t - resume.t
    ages = [look.age_s for look in looks[found[0] + 1 : found[1] + 1] if look.age_s is not None]
    p50, p95 = _quantiles(ages)
    return {
        "catch_up_rate": (done.forwarded - resume.forwarded) / seconds if seconds > 0 else None,
        "catch_up_s": seconds,
        "resume_lag_s": resume.t - marks["up"],
        "backlog_at_return": _waiting(resume),
        "catch_up_age_p50": p50,
        "catch_up_age_p95": p95,
        "outlasted_capture": done.t > _capture_ended(looks),
    }


def _capture_ended(looks: Sequence[Look]) -> float:
    """When the sources had emitted all they would (the first look showing it)."""
    last = max((look.emitted for look in looks if look.emitted is not None), default=None)
    return next((look.t for look in looks if look.emitted == last), math.inf)


def _memory(run: ForwardRun, found: tuple[int, int] | None) -> Figures:
    looks, marks = run.looks, run.marks
    during = [look.rss for look in looks if marks["down"] <= look.t <= marks["down_end"]]
    before = looks[_nearest(looks, marks["live_end"])].rss
    at_end = looks[_nearest(looks, marks["down_end"])].rss
    return {
        "rss_before_mib": before / MIB,
        "rss_outage_max_mib": max(during, default=at_end) / MIB,
        "rss_outage_end_mib": at_end / MIB,
        "rss_caught_up_mib": looks[found[1]].rss / MIB if found else None,
        "rss_growth_mib": (at_end - before) / MIB,
    }


def _steady_memory(steady: SteadyRun | None, growth: float) -> Figures:
    if steady is None or not steady.looks:
        return {"rss_steady_growth_mib": None, "rss_outage_extra_mib": None}
    looks, marks = steady.looks, steady.marks
    before = looks[_nearest(looks, marks["live_end"])].rss
    at_end = looks[_nearest(looks, marks["down_end"])].rss
    grown = (at_end - before) / MIB
    return {"rss_steady_growth_mib": grown, "rss_outage_extra_mib": growth - grown}


def _cpu(live: Window, plain: Window, cameras: int) -> Figures:
    return {
        "cpu_forwarding": live.cores,
        "cpu_plain": plain.cores,
        "cpu_per_camera": (live.cores - plain.cores) / cameras,
        "machine_cores_forwarding": live.machine_cores,
        "machine_cores_plain": plain.machine_cores,
    }


def _arrival(run: ForwardRun) -> Figures:
    gap_free = all(seqs == list(range(len(seqs))) for seqs in run.emitted.values())
    counts = {consumer: len(seqs) for consumer, seqs in run.emitted.items()}
    return {
        "emitted": counts,
        "arrived": dict(run.arrived),
        "gap_free": gap_free,
        "exit_status": run.exit_status,
        "all_arrived": gap_free and counts == run.arrived and run.exit_status == 0,
    }


def _ratios(out: Figures) -> Figures:
    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b <= 0 else a / b

    return {
        "catch_up_x": ratio(out["catch_up_rate"], out["live_rate"]),
        "age_p50_x": ratio(out["catch_up_age_p50"], out["live_age_p50"]),
        "age_p95_x": ratio(out["catch_up_age_p95"], out["live_age_p95"]),
        "cpu_x": ratio(out["cpu_forwarding"], out["cpu_plain"]),
    }


def spread(values: Sequence[float | None]) -> tuple[float, float, float] | None:
    """(median, min, max) of the values that exist, None if none does."""
    have = [v for v in values if v is not None]
    if not have:
        return None
    return statistics.median(have), min(have), max(have)


def verdict(runs: Sequence[Figures]) -> str:
    """MET when every run caught up at :data:`TARGET` x the live rate or more and
    every item arrived, over 3 runs or more; else what fell short."""
    if any(not run["all_arrived"] for run in runs):
        return "NOT MET: items missing"
    multiples = [run["catch_up_x"] for run in runs]
    if any(m is None or m < TARGET for m in multiples):
        return f"NOT MET: catch-up below {TARGET:g}x"
    return "MET" if len(runs) >= 3 else "MET in every run (fewer than 3 runs)"
