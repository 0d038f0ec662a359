"""One run of :mod:`bench.emissions` in the parent: the children it ran, and the verdict.

:class:`Report` collects each measurement's :class:`~bench._lib.common.ChildRun`
(:func:`run_measure` starts ``python -m bench.emissions --child NAME``);
:func:`summarise` reduces it to the JSON the table shows, with the targets, the
delivery checks and the anomalies (errors, timeouts, notable stderr). Apart from
the entry point so the Redis backend (:mod:`bench.emissions.redis_queue`) shares the
running, the delivery checks and the anomalies without importing
:mod:`bench.emissions` back.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

from bench._lib.common import ChildRun, Json, best_and_median, mib, notable_stderr, ratio, run_child

MODULE = "bench.emissions"  # the entry point; its child_main runs each measurement

TARGET_RATE = 25_000.0
TARGET_VS_PIPECAT = 1.4
TARGET_P99_S = 0.005
TARGET_RSS_GROWTH = 32 * 1024 * 1024


@dataclass
class Report:
    meta: Json
    runs: dict[str, list[ChildRun]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, key: str, run: ChildRun) -> None:
        self.runs.setdefault(key, []).append(run)

    def results(self, key: str) -> list[Json]:
        return [r.result for r in self.runs.get(key, []) if r.result is not None]

    def complete(self, key: str) -> list[Json]:
        return [r for r in self.results(key) if not r.get("timed_out") and "error" not in r]


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def run_measure(report: Report, key: str, name: str, args: Json, budget_s: float) -> ChildRun:
    progress(f"{key} ...")
    run = run_child(MODULE, name, args, hard_timeout_s=budget_s + 60)
    state = "timed out" if run.timed_out else (run.error or "ok")
    progress(f"{key}: {state} ({run.wall_s:.1f} s)")
    report.add(key, run)
    return run


# -- summarising ---------------------------------------------------------------------------


def summarise(report: Report) -> Json:
    """Everything the table shows, as JSON."""
    out: Json = {"meta": report.meta, "notes": list(report.notes)}

    mf_runs = report.results("throughput")
    mf_rates = [r["rate"] for r in report.complete("throughput")]
    partial = not mf_rates
    if partial:
        # No run finished: items consumed per second until the watchdog fired. The
        # real end-to-end rate is lower still (N items did not finish in the time).
        mf_rates = [
            r["distinct"] / r["elapsed_s"]
            for r in mf_runs
            if r.get("timed_out") and r.get("elapsed_s") and "distinct" in r
        ]
    mf_best, mf_median = best_and_median(mf_rates)
    out["mediaflow"] = {
        "rates": mf_rates,
        "best": nan_none(mf_best),
        "median": nan_none(mf_median),
        "partial": partial and bool(mf_rates),
        "runs": mf_runs,
    }

    pc_results = report.results("pipecat")
    unavailable = next((r["unavailable"] for r in pc_results if "unavailable" in r), None)
    pc_rates = [rate for r in report.complete("pipecat") for rate in r.get("rates", [])]
    pc_best, pc_median = best_and_median(pc_rates)
    pipecat: Json = {"rates": pc_rates, "best": nan_none(pc_best), "median": nan_none(pc_median)}
    if unavailable:
        pipecat["unavailable"] = unavailable
    elif pc_results:
        pipecat["version"] = pc_results[0].get("version")
    elif "pipecat" not in report.runs:
        pipecat["skipped"] = True
    errors = [r.error for r in report.runs.get("pipecat", []) if r.error]
    if errors and not pc_rates:
        pipecat["unavailable"] = errors[0]
    out["pipecat"] = pipecat

    qf_rates = [
        rate for r in report.complete("pipecat_queue_frame") for rate in r.get("rates", ())
    ]  # none when Pipecat is not installed (its "unavailable" result)
    qf_best, qf_median = best_and_median(qf_rates)
    out["pipecat_queue_frame"] = {
        "rates": qf_rates,
        "best": nan_none(qf_best),
        "median": nan_none(qf_median),
    }

    q_rates = [rate for r in report.complete("asyncio_queue") for rate in r["rates"]]
    q_best, q_median = best_and_median(q_rates)
    out["asyncio_queue"] = {
        "rates": q_rates,
        "best": nan_none(q_best),
        "median": nan_none(q_median),
    }

    sqlite_results = report.complete("sqlite")
    out["sqlite"] = sqlite_results[0] if sqlite_results else None
    lat = report.results("latency")
    out["latency"] = lat[0] if lat else None
    backlog = report.results("backlog")
    out["backlog"] = backlog[0] if backlog else None
    prof = report.results("profile")
    out["profile"] = prof[0] if prof else None

    sqlite_insert = out["sqlite"]["insert"] if out["sqlite"] else None
    out["ratios"] = {
        "mediaflow_vs_pipecat": {
            "median": ratio(mf_median, pc_median),
            "best": ratio(mf_best, pc_best),
        },
        "mediaflow_vs_pipecat_queue_frame": {
            "median": ratio(mf_median, qf_median),
            "best": ratio(mf_best, qf_best),
        },
        "mediaflow_vs_asyncio_queue": {
            "median": ratio(mf_median, q_median),
            "best": ratio(mf_best, q_best),
        },
        "mediaflow_vs_sqlite_insert": {
            "median": ratio(mf_median, sqlite_insert["median"] if sqlite_insert else None),
            "best": ratio(mf_best, sqlite_insert["best"] if sqlite_insert else None),
        },
    }
    out["targets"] = targets(out)
    out["checks"] = delivery_checks(report, out)
    out["anomalies"] = anomalies(report)
    return out


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def nan_none(value: float) -> float | None:
    return None if math.isnan(value) else value


def targets(out: Json) -> list[Json]:
    mf = out["mediaflow"]["median"]
    vs_pc = out["ratios"]["mediaflow_vs_pipecat"]["median"]
    if out["mediaflow"]["partial"]:
        # A run that could not finish N in its time is below N / timeout for sure.
        run = next(r for r in out["mediaflow"]["runs"] if r.get("timed_out"))
        ceiling = run["n"] / run["timeout_s"]
        rate_ok: bool | None = False if ceiling < TARGET_RATE else None
        pc = out["pipecat"]["median"]
        pc_ok: bool | None = False if pc is not None and ceiling < TARGET_VS_PIPECAT * pc else None
    else:
        rate_ok = None if mf is None else mf >= TARGET_RATE
        pc_ok = None if vs_pc is None else vs_pc >= TARGET_VS_PIPECAT
    lat = out["latency"]
    p99 = lat.get("p99_s") if lat and not lat.get("timed_out") and lat.get("samples") else None
    backlog = out["backlog"]
    growth = backlog.get("growth") if backlog else None
    backlog_partial = bool(backlog and backlog.get("timed_out"))
    if growth is None:
        rss_ok = None
    elif backlog_partial:  # growth so far only: enough to fail, not to pass
        rss_ok = False if growth >= TARGET_RSS_GROWTH else None
    else:
        rss_ok = growth < TARGET_RSS_GROWTH
    mf_partial = bool(out["mediaflow"]["partial"])
    return [
        {
            "name": "durable emissions/s (median)",
            "target": f"≥ {TARGET_RATE:,.0f}",
            "value": mf,
            "ok": rate_ok,
            "partial": mf_partial,
        },
        {
            "name": "mediaflow / Pipecat (medians)",
            "target": f"≥ {TARGET_VS_PIPECAT}x",
            "value": vs_pc,
            "ok": pc_ok,
            "partial": mf_partial,
        },
        {
            "name": "p99 emit→consumer @ rate",
            "target": f"≤ {TARGET_P99_S * 1000:.0f} ms",
            "value": p99,
            "ok": None if p99 is None else p99 <= TARGET_P99_S,
        },
        {
            "name": "RSS growth over backlog",
            "target": f"< {mib(TARGET_RSS_GROWTH):.0f} MiB",
            "value": growth,
            "ok": rss_ok,
            "partial": backlog_partial,
        },
    ]


def delivery_checks(report: Report, out: Json) -> list[str]:
    """Plain facts about delivery that a benchmark run happens to exercise."""
    problems: list[str] = []
    for index, r in enumerate(report.results("throughput"), 1):
        label = f"throughput run {index}"
        buffer = r.get("node_buffer", 256)  # MEDIAFLOW_NODE_BUFFER's default, docs/operating.md
        if r.get("duplicates"):
            problems.append(
                f"{label}: {r['duplicates']:,} duplicate consumer runs for {r['n']:,} emissions "
                f"({r.get('redelivered_runs', 0):,} marked redelivery; no process crashed)"
            )
        if r.get("order_regressions"):
            problems.append(f"{label}: {r['order_regressions']:,} out-of-order consumer runs")
        if not r.get("timed_out") and r.get("distinct") != r.get("n"):
            problems.append(f"{label}: consumed {r.get('distinct')} of {r.get('n')} seqs")
        stats = r.get("queue_stats") or {}
        if stats.get("redelivered"):
            problems.append(f"{label}: queue counted {stats['redelivered']:,} redeliveries")
        peak = r.get("peak_in_memory") or 0
        if peak > buffer + 1:  # the line plus the item running (as tests/test_engine.py)
            problems.append(
                f"{label}: the consumer held up to {peak:,} items in memory "
                f"(MEDIAFLOW_NODE_BUFFER is {buffer})"
            )
    backlog = out["backlog"]
    if backlog and backlog.get("consumed_while_paused"):
        problems.append(
            f"backlog: {backlog['consumed_while_paused']:,} items consumed "
            "while the flow was paused"
        )
    if backlog and not backlog.get("timed_out") and backlog.get("consumed") != backlog.get("items"):
        problems.append(f"backlog: consumed {backlog.get('consumed')} of {backlog.get('items')}")
    return problems


def anomalies(report: Report) -> list[Json]:
    found: list[Json] = []
    for key, runs in report.runs.items():
        for index, run in enumerate(runs, 1):
            lines = notable_stderr(run.stderr)
            if run.error or run.timed_out or lines:
                found.append(
                    {
                        "measure": f"{key} #{index}",
                        "error": run.error,
                        "timed_out": run.timed_out,
                        "returncode": run.returncode,
                        "stderr": lines,
                    }
                )
    return found
