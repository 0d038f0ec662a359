"""The rules of :mod:`bench.speech.engines`: WER, latencies, "kept up", spreads, tables. Pure.

A stream *kept up* in a real-time run when the run went idle (every final out)
before its deadline, the stream gave at least as many finals as one stream
alone did in the same run, and none of its finals came later after the end of
its utterance than ``2 x (the lone stream's latest) + 1 s``: a stream falling
behind builds a backlog whose latency grows with every utterance, which this
bound catches within a run of a minute.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from bench._lib.common import percentile
from bench.speech.wer import normalise, wer

Json = dict[str, Any]

LATENCY_SLACK_X = 2.0
LATENCY_SLACK_S = 1.0


def text_wer(references: Sequence[str], hypotheses: Iterable[str]) -> float:
    """WER of the hypotheses, joined in order, against the references joined: both
    normalised (:func:`bench.speech.wer.normalise`). Joined, so a final that spans two
    recordings or a recording cut in two finals costs nothing by itself."""
    reference = " ".join(normalise(text) for text in references)
    hypothesis = " ".join(normalise(text) for text in hypotheses)
    return wer([(reference, hypothesis)])


def latency_bound(alone: Sequence[float]) -> float:
    """The latest a final may come in a stream that keeps up (module doc)."""
    return LATENCY_SLACK_X * max(alone, default=0.0) + LATENCY_SLACK_S


def kept_up(trial: Json, alone: Json) -> tuple[bool, str]:
    """Whether every stream of ``trial`` kept up, against the lone stream ``alone``
    of the same run (both as :func:`bench.speech.engines.child_realtime` returns
    them), and why not."""
    if trial["stopped"]:
        return False, f"not idle {trial['deadline_s']:.0f} s after the start"
    expected = min(alone["finals_per_stream"])
    short = [n for n, count in enumerate(trial["finals_per_stream"]) if count < expected]
    if short:
        return False, f"streams {short} gave fewer than {expected} finals"
    bound = latency_bound(alone["latencies"])
    worst = max(trial["latencies"], default=0.0)
    if worst > bound:
        return False, f"a final {worst:.2f} s after its utterance (bound {bound:.2f} s)"
    return True, "ok"


def latency_stats(latencies: Sequence[float]) -> Json:
    ordered = sorted(latencies)
    return {
        "n": len(ordered),
        "p50": percentile(ordered, 50),
        "p95": percentile(ordered, 95),
        "max": ordered[-1] if ordered else math.nan,
    }


def spread(values: Iterable[float | None]) -> Json:
    """Median, min and max of the values that are numbers."""
    kept = [v for v in values if v is not None and not math.isnan(v)]
    if not kept:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(kept), "min": min(kept), "max": max(kept), "n": len(kept)}


def fmt_spread(s: Json, fmt: str = "{:.3f}", unit: str = "") -> str:
    if s["median"] is None:
        return "—"
    one = fmt.format(s["median"]) + unit
    if s["n"] < 2:
        return one
    return f"{one} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"


# -- the report --------------------------------------------------------------------


def summarise(report: Json) -> Json:
    """Per engine, each number's spread over the runs (ratios were taken per run)."""
    out: Json = {}
    for engine in report["engines"]:
        runs = [run[engine] for run in report["runs"]]
        cost = [run.get("cost") for run in runs if run.get("cost")]
        ladder = [run.get("realtime") for run in runs if run.get("realtime")]
        wer_rows = [run.get("wer") for run in runs if run.get("wer")]
        row: Json = {}
        if wer_rows:
            first = wer_rows[0]
            row["wer_whole"] = spread(r["whole"] for r in wer_rows)
            row["wer_pipeline"] = {
                chunk: spread(r["pipeline"][chunk] for r in wer_rows) for chunk in first["pipeline"]
            }
            row["wer_delta_points"] = {
                chunk: spread(100 * (r["pipeline"][chunk] - r["whole"]) for r in wer_rows)
                for chunk in first["pipeline"]
            }
        if cost:
            row["cost_pipeline"] = spread(c["pipeline_cpu_per_s"] for c in cost)
            row["cost_bare"] = spread(c["bare_cpu_per_s"] for c in cost)
            row["cost_ratio"] = spread(c["ratio"] for c in cost)
        if ladder:
            row["sustained_k"] = spread(float(r["sustained_k"]) for r in ladder)
            row["failed_k"] = [r["failed_k"] for r in ladder]
            row["latency_k1_p50"] = spread(r["k1"]["latency"]["p50"] for r in ladder)
            row["latency_k1_p95"] = spread(r["k1"]["latency"]["p95"] for r in ladder)
            at_k = [r["at_k"] for r in ladder if r.get("at_k")]
            row["latency_k_p50"] = spread(a["latency"]["p50"] for a in at_k)
            row["latency_k_p95"] = spread(a["latency"]["p95"] for a in at_k)
        out[engine] = row
    return out


def table(report: Json) -> str:
    summary = summarise(report)
    engines = list(report["engines"])
    runs = len(report["runs"])
    head = "| | " + " | ".join(engines) + " |"
    rule = "| --- |" + " --- |" * len(engines)
    lines = [
        f"speech engines side by side: {runs} run(s), median (min-max); "
        f"{report['cpus']} CPUs, load average {report['load_before']} before, "
        f"{report['load_after']} after" + (" (QUICK: tiny durations)" if report["quick"] else ""),
        "",
        head,
        rule,
    ]

    def row(label: str, cell: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(summary[e]) for e in engines) + " |")

    first = summary[engines[0]]
    if "wer_whole" in first:
        row("WER, each recording decoded whole", lambda s: fmt_spread(s["wer_whole"], "{:.1%}"))
        for chunk in first["wer_pipeline"]:
            row(
                f"WER, pipeline at {chunk} ms chunks (Δ points)",
                lambda s, c=chunk: (
                    f"{fmt_spread(s['wer_pipeline'][c], '{:.1%}')} "
                    f"({s['wer_delta_points'][c]['median']:+.1f})"
                ),
            )
    if "cost_ratio" in first:
        row("CPU s / audio s, pipeline (per stream)", lambda s: fmt_spread(s["cost_pipeline"]))
        row("CPU s / audio s, bare recogniser", lambda s: fmt_spread(s["cost_bare"]))
        row("pipeline / bare (same run)", lambda s: fmt_spread(s["cost_ratio"], "{:.2f}", "x"))
    if "sustained_k" in first:
        row(
            "streams sustained in real time, 50 % talk",
            lambda s: fmt_spread(s["sustained_k"], "{:.0f}"),
        )
        row(
            "first K failing, per run",
            lambda s: ", ".join("none tried" if k is None else str(k) for k in s["failed_k"]),
        )
        row(
            "end of utterance → final, K = 1, p50",
            lambda s: fmt_spread(s["latency_k1_p50"], "{:.2f}", " s"),
        )
        row(
            "end of utterance → final, K = 1, p95",
            lambda s: fmt_spread(s["latency_k1_p95"], "{:.2f}", " s"),
        )
        row(
            "end of utterance → final, sustained K, p50",
            lambda s: fmt_spread(s["latency_k_p50"], "{:.2f}", " s"),
        )
        row(
            "end of utterance → final, sustained K, p95",
            lambda s: fmt_spread(s["latency_k_p95"], "{:.2f}", " s"),
        )
    return "\n".join(lines)
