"""The tables: one column per run and the spread (median, min-max)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bench.sinks.judge import TARGET_MQTT, spread

Fmt = Callable[[float], str]
Row = tuple[str, Callable[[dict[str, Any]], Any], Fmt]


def _x(v: float) -> str:
    return f"{v:.2f}x"


def _rate(v: float) -> str:
    return f"{v:,.0f}/s"


def _mib(v: float) -> str:
    return f"{v:+.1f} MiB" if v < 0 else f"{v:.1f} MiB"


def _s(v: float) -> str:
    return f"{v:.1f} s"


def _n(v: float) -> str:
    return f"{v:,.0f}"


THROUGHPUT: list[Row] = [
    (f"mqtt sink / bare aiomqtt, QoS 1 (target >= {TARGET_MQTT:.2f}x)",
     lambda r: r["mqtt"]["ratio"], _x),
    ("mqtt sink, events/s", lambda r: r["mqtt"]["flow"], _rate),
    ("bare aiomqtt, one in flight, events/s", lambda r: r["mqtt"]["raw"], _rate),
    ("bare aiomqtt, a window in flight, events/s", lambda r: r["mqtt"].get("raw_window"), _rate),
    ("webhook sink / bare aiohttp client", lambda r: r["webhook"]["ratio"], _x),
    ("webhook sink, items/s", lambda r: r["webhook"]["flow"], _rate),
    ("bare aiohttp client, items/s", lambda r: r["webhook"]["raw"], _rate),
]  # fmt: skip

BROKER: list[Row] = [
    ("events emitted", lambda r: r.get("emitted"), _n),
    ("events arrived (distinct)", lambda r: r.get("distinct"), _n),
    ("repeats (all marked: redelivery or DUP)", lambda r: r.get("repeats"), _n),
    ("retries logged (broker away)", lambda r: r.get("retries"), _n),
    (
        "broker back -> the run exited (source ends --post-s after)",
        lambda r: r.get("drained_after_up_s"),
        _s,
    ),
    ("flow RSS when the broker stopped", lambda r: r.get("rss_before_mib"), _mib),
    ("flow RSS, most during the outage", lambda r: r.get("rss_peak_mib"), _mib),
    ("flow RSS at the outage's end", lambda r: r.get("rss_end_mib"), _mib),
    ("flow RSS after the backlog went out", lambda r: r.get("rss_after_mib"), _mib),
    ("RSS growth over the outage", lambda r: r.get("rss_growth_mib"), _mib),
    ("RSS growth, broker up, same window", lambda r: r.get("rss_steady_growth_mib"), _mib),
    ("RSS growth: outage - broker up", lambda r: r.get("rss_outage_extra_mib"), _mib),
]

RECEIVER: list[Row] = [
    ("items emitted", lambda r: r.get("emitted"), _n),
    ("items delivered (distinct)", lambda r: r.get("distinct"), _n),
    ("POSTs answered 500", lambda r: r.get("answers", {}).get("500"), _n),
    ("retries logged", lambda r: r.get("retries"), _n),
    ("answers back to 200 -> first delivered", lambda r: r.get("back_to_first_2xx_s"), _s),
    ("answers back to 200 -> the run exited", lambda r: r.get("drained_after_up_s"), _s),
    ("flow RSS when the 500s began", lambda r: r.get("rss_before_mib"), _mib),
    ("flow RSS, most during the 500s", lambda r: r.get("rss_peak_mib"), _mib),
    ("RSS growth over the 500s", lambda r: r.get("rss_growth_mib"), _mib),
]


def _cell(value: Any, fmt: Fmt) -> str:
    return "—" if value is None else fmt(float(value))


def table(rows: Sequence[Row], runs: Sequence[dict[str, Any]], checks: bool = False) -> list[str]:
    """Markdown rows: each number per run, then median (min-max)."""
    head = ["number", *(f"run {i}" for i in range(1, len(runs) + 1)), "median (min-max)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for label, get, fmt in rows:
        values = [get(run) for run in runs]
        found = spread(values)
        summary = "—" if found is None else f"{fmt(found[0])} ({fmt(found[1])}-{fmt(found[2])})"
        lines.append("| " + " | ".join([label, *(_cell(v, fmt) for v in values), summary]) + " |")
    if checks:
        cells = [_arrived(run) for run in runs]
        lines.append("| every event once or marked, in order, none dead-lettered, "
                     "signatures verified | " + " | ".join(cells) + " | |")  # fmt: skip
    return lines


def _arrived(run: dict[str, Any]) -> str:
    if run.get("all_arrived") and run.get("dead_letters") == 0 and run.get("exit_status") == 0:
        return "yes"
    keys = ("missing", "in_order", "unmarked_repeats", "all_verified", "dead_letters")
    return "NO: " + ", ".join(f"{k} {run.get(k)}" for k in keys) + f", exit {run['exit_status']}"
