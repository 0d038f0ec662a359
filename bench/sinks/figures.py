"""The numbers of one outage run, from its looks and marks. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.sinks.outage import Look, OutageRun

MIB = 1 << 20
Figures = dict[str, Any]


def _nearest(looks: Sequence[Look], t: float) -> Look:
    return min(looks, key=lambda look: abs(look.t - t))


def _growth(run: OutageRun) -> tuple[float, float, float, float] | None:
    """RSS (MiB) at the outage's start, its most during it, at its end, growth."""
    looks, marks = run.looks, run.marks
    if not looks or "down" not in marks or "down_end" not in marks:
        return None
    before = _nearest(looks, marks["down"]).rss
    during = [look.rss for look in looks if marks["down"] <= look.t <= marks["down_end"]]
    at_end = _nearest(looks, marks["down_end"]).rss
    return before / MIB, max(during, default=at_end) / MIB, at_end / MIB, (at_end - before) / MIB


def outage_figures(run: OutageRun, steady: OutageRun | None) -> Figures:
    """One run's figures: arrival, RSS through the outage against the steady peer's
    over the same window, how long the flow took to deliver the rest."""
    out: Figures = {
        "exit_status": run.exit_status,
        "retries": run.retries,
        "dead_letters": run.dropped,
        **run.extra,
    }
    if run.arrival is not None:
        out.update(run.arrival.__dict__ | {"all_arrived": run.arrival.ok})
    grown = _growth(run)
    if grown is not None:
        out["rss_before_mib"], out["rss_peak_mib"], out["rss_end_mib"], out["rss_growth_mib"] = (
            grown
        )
        out["rss_after_mib"] = run.looks[-1].rss / MIB
    marks = run.marks
    if "up" in marks and "exited" in marks:
        out["drained_after_up_s"] = marks["exited"] - marks["up"]
    if steady is not None:
        peer = _growth(steady)
        if peer is not None and grown is not None:
            out["rss_steady_growth_mib"] = peer[3]
            out["rss_outage_extra_mib"] = grown[3] - peer[3]
    return out
