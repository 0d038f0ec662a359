"""The table: one column per run and the spread (median, min-max), ratios first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bench.edge.judge import TARGET, Figures, spread

Fmt = Callable[[float], str]


def _x(v: float) -> str:
    return f"{v:.2f}x"


def _s(v: float) -> str:
    return f"{v:.2f} s"


def _rate(v: float) -> str:
    return f"{v:,.1f}/s"


def _pct(v: float) -> str:
    return f"{100 * v:.1f} %"


def _mib(v: float) -> str:
    return f"{v:.1f} MiB"


def _n(v: float) -> str:
    return f"{v:,.0f}"


ROWS: list[tuple[str, str, Fmt]] = [
    (f"catch-up rate / live capture rate (target >= {TARGET:g}x)", "catch_up_x", _x),
    ("camera's newest value, age p50: catching up / live", "age_p50_x", _x),
    ("camera's newest value, age p95: catching up / live", "age_p95_x", _x),
    ("box CPU: forwarding / the same flow without", "cpu_x", _x),
    ("forwarding CPU per camera (of one core)", "cpu_per_camera", _pct),
    ("box CPU forwarding, live (of one core)", "cpu_forwarding", _pct),
    ("box CPU without forwarding (of one core)", "cpu_plain", _pct),
    ("live capture rate (items)", "live_rate", _rate),
    ("catch-up rate (items forwarded)", "catch_up_rate", _rate),
    ("backlog when forwarding resumed (items)", "backlog_at_return", _n),
    ("catch-up time", "catch_up_s", _s),
    ("link back -> first forward", "resume_lag_s", _s),
    ("newest camera value's age, live p50", "live_age_p50", _s),
    ("newest camera value's age, live p95", "live_age_p95", _s),
    ("newest camera value's age, catching up p50", "catch_up_age_p50", _s),
    ("newest camera value's age, catching up p95", "catch_up_age_p95", _s),
    ("box RSS before the outage", "rss_before_mib", _mib),
    ("box RSS, most during the outage", "rss_outage_max_mib", _mib),
    ("box RSS at the outage's end", "rss_outage_end_mib", _mib),
    ("box RSS when caught up", "rss_caught_up_mib", _mib),
    ("box RSS growth over the outage", "rss_growth_mib", _mib),
    ("box RSS growth, link up all along, same window", "rss_steady_growth_mib", _mib),
    ("box RSS growth: outage - link up (what the outage costs)", "rss_outage_extra_mib", _mib),
    ("machine busy cores, forwarding live", "machine_cores_forwarding", lambda v: f"{v:.2f}"),
    ("machine busy cores, without forwarding", "machine_cores_plain", lambda v: f"{v:.2f}"),
]


def _cell(value: Any, fmt: Fmt) -> str:
    return "—" if value is None else fmt(float(value))


def table(runs: Sequence[Figures]) -> list[str]:
    """Markdown rows: each number per run, then median (min-max)."""
    head = ["number", *(f"run {i}" for i in range(1, len(runs) + 1)), "median (min-max)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for label, key, fmt in ROWS:
        values = [run.get(key) for run in runs]
        found = spread(values)
        summary = "—" if found is None else f"{fmt(found[0])} ({fmt(found[1])}-{fmt(found[2])})"
        cells = [_cell(v, fmt) for v in values]
        lines.append("| " + " | ".join([label, *cells, summary]) + " |")
    arrived = ["yes" if run["all_arrived"] else _missing(run) for run in runs]
    lines.append("| every item arrived, once | " + " | ".join(arrived) + " | |")
    return lines


def _missing(run: Figures) -> str:
    return f"NO: emitted {run['emitted']}, arrived {run['arrived']}, exit {run['exit_status']}"


def notes(runs: Sequence[Figures]) -> list[str]:
    out = []
    for i, run in enumerate(runs, 1):
        if run.get("outlasted_capture"):
            out.append(f"run {i}: the catch-up outlasted the capture (its rate is a drain's)")
        if run.get("catch_up_x") is None:
            out.append(f"run {i}: no catch-up found in the looks")
        for error in run.get("errors", []):
            out.append(f"run {i}: {error}")
    return out
