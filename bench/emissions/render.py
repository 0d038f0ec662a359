"""The table :mod:`bench.emissions` prints: pure functions of the summary's JSON.

:func:`render` lays out the SQLite backend's summary (from
:func:`bench.emissions.report.summarise`); :func:`table`, :func:`fmt_s` and
:func:`render_profile` are shared with the Redis backend's table
(:mod:`bench.emissions.redis_queue`). Nothing here measures or judges.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench._lib.common import Json, fmt_ms, fmt_rate, fmt_ratio, mib, verdict
from bench.emissions.peers import ASYNCIO_QUEUE_SIZE


def render(s: Json) -> str:
    meta = s["meta"]
    lines = [
        f"mediaflow durable emissions — SQLite backend (WAL, synchronous=NORMAL)   "
        f"N={meta['n']:,}, {meta['reps']} runs",
        f"Python {meta['python']} on {meta.get('loop', 'asyncio')}, SQLite {meta['sqlite']}, "
        f"{meta['cpus']} CPUs, "
        f"{meta['platform']}, {meta['started_at']}",
        "",
    ]
    rows: list[tuple[str, str, str]] = []

    mf = s["mediaflow"]
    mf_line = f"best {fmt_rate(mf['best'])}  median {fmt_rate(mf['median'])}"
    complete = sum(1 for r in mf["runs"] if "rate" in r)
    rows.append(
        (
            "1. mediaflow durable emissions/s",
            mf_line + ("  PARTIAL (no run finished)" if mf["partial"] else ""),
            f"{complete} of {s['meta']['reps']} runs complete",
        )
    )
    for r in mf["runs"]:
        if r.get("timed_out"):
            elapsed = r.get("elapsed_s") or 0.0
            rows.append(
                (
                    "   run (TIMEOUT)",
                    f"after {r['timeout_s']:.0f} s: {r.get('emitted', 0):,} emitted, "
                    f"{r.get('distinct', 0):,} consumed "
                    f"({fmt_rate(r.get('distinct', 0) / elapsed if elapsed else None)}/s)",
                    f"source done {fmt_s(r.get('source_s'))}",
                )
            )
            continue
        if "rate" not in r:
            continue
        rows.append(
            (
                "   run",
                f"{fmt_rate(r['rate'])}/s  (source done {r['source_s']:.2f} s, "
                f"all consumed {fmt_s(r.get('all_consumed_s'))}, idle {r['idle_s']:.2f} s)",
                f"peak in memory {r.get('peak_in_memory', '?')}",
            )
        )

    lat = s["latency"]
    if lat is None:
        rows.append(("2. emit→consumer latency", "skipped", ""))
    elif "error" in lat:
        rows.append(("2. emit→consumer latency", f"error: {lat['error']}", ""))
    else:
        rows.append(
            (
                f"2. emit→consumer latency @ {lat['rate']:,.0f}/s",
                f"p50 {fmt_ms(lat['p50_s'])}  p99 {fmt_ms(lat['p99_s'])}  "
                f"max {fmt_ms(lat['max_s'])}",
                f"{lat['samples']:,} samples, source achieved {lat['achieved_rate']:,.0f}/s"
                + ("  TIMEOUT" if lat.get("timed_out") else ""),
            )
        )
        rows.append(
            (
                "   emit() call itself",
                f"p50 {fmt_ms(lat['emit_p50_s'])}  p99 {fmt_ms(lat['emit_p99_s'])}  "
                f"max {fmt_ms(lat['emit_max_s'])}",
                f"source at most {lat['source_max_behind_s'] * 1000:.1f} ms behind schedule",
            )
        )

    rows.extend(backlog_rows(s["backlog"]))

    rows.append(("4. peers and ceilings (same run)", "", ""))
    pc = s["pipecat"]
    if pc.get("skipped"):
        rows.append(("   pipecat", "skipped (--skip)", ""))
    elif "unavailable" in pc:
        rows.append(("   pipecat:", f"unavailable ({pc['unavailable']})", ""))
    else:
        rows.append(
            (
                f"   pipecat {pc.get('version', '')} (memory, observers off)",
                f"best {fmt_rate(pc['best'])}  median {fmt_rate(pc['median'])} frames/s",
                f"{len(pc['rates'])} runs",
            )
        )
    qf = s["pipecat_queue_frame"]
    if qf["rates"]:
        rows.append(
            (
                "   pipecat via PipelineWorker.queue_frame",
                f"best {fmt_rate(qf['best'])}  median {fmt_rate(qf['median'])} frames/s",
                "reference only",
            )
        )
    q = s["asyncio_queue"]
    queue_label = f"   asyncio.Queue({ASYNCIO_QUEUE_SIZE}) hand-off"
    if not q["rates"]:
        rows.append((queue_label, "skipped or failed", ""))
    else:
        rows.append(
            (
                queue_label,
                f"best {fmt_rate(q['best'])}  median {fmt_rate(q['median'])} items/s",
                f"{len(q['rates'])} runs",
            )
        )
    sq = s["sqlite"]
    if sq is None:
        rows.append(("   raw SQLite", "skipped or failed", ""))
    else:
        rows.append(
            (
                "   raw SQLite 1-INSERT transactions/s",
                f"best {fmt_rate(sq['insert']['best'])}  median {fmt_rate(sq['insert']['median'])}",
                f"{sq['n']:,} rows",
            )
        )
        rows.append(
            (
                f"   raw SQLite claim+ack/s (batch {sq['claim_ack']['batch']})",
                f"best {fmt_rate(sq['claim_ack']['best'])}  "
                f"median {fmt_rate(sq['claim_ack']['median'])}",
                f"{sq['n']:,} rows",
            )
        )

    partial = " — mediaflow PARTIAL" if mf["partial"] else ""
    rows.append((f"ratios (median / median; best / best){partial}", "", ""))
    names = {
        "mediaflow_vs_pipecat": "   mediaflow / Pipecat",
        "mediaflow_vs_pipecat_queue_frame": "   mediaflow / Pipecat via queue_frame",
        "mediaflow_vs_asyncio_queue": "   mediaflow / asyncio.Queue",
        "mediaflow_vs_sqlite_insert": "   mediaflow / raw SQLite inserts",
    }
    for key, label in names.items():
        value = s["ratios"][key]
        rows.append((label, f"{fmt_ratio(value['median'])}  ({fmt_ratio(value['best'])})", ""))

    lines.extend(table(rows))
    lines.append("")
    lines.append("targets")
    target_rows = [
        (
            f"   {t['name']}",
            f"{fmt_target(t)}{' (partial)' if t.get('partial') else ''}",
            f"target {t['target']}",
            verdict(t["ok"]),
        )
        for t in s["targets"]
    ]
    lines.extend(table(target_rows))
    lines.append("")
    if s["checks"]:
        lines.append("delivery checks: PROBLEMS")
        lines.extend(f"   - {line}" for line in s["checks"])
    else:
        lines.append("delivery checks: every seq consumed exactly once, in order")
    for note in s["notes"]:
        lines.append(f"note: {note}")
    for a in s["anomalies"]:
        head = f"anomaly in {a['measure']}"
        if a["error"]:
            head += f": {a['error']}"
        if a["timed_out"]:
            head += " (timed out)"
        lines.append(head)
        lines.extend(f"   | {line}" for line in a["stderr"][:20])
    if s["profile"]:
        lines.append("")
        lines.extend(render_profile(s["profile"]))
    return "\n".join(lines)


def backlog_rows(b: Json | None) -> list[tuple[str, str, str]]:
    if b is None:
        return [("3. RSS over a backlog", "skipped", "")]
    if "error" in b and "marks" not in b:
        return [("3. RSS over a backlog", f"error: {b['error']}", "")]
    marks = b.get("marks") or []
    base = marks[0][1] if marks else 0
    points = "  ".join(
        f"{'before' if k == 0 else f'{k // 1000}k'} {mib(rss):.1f}" for k, rss in marks
    )
    rows = [
        (
            f"3. RSS over {b['items'] // 1000}k backlog (~{b['payload']} B each)",
            f"{points} MiB",
            "TIMEOUT" if b.get("timed_out") else "",
        )
    ]
    if "rss_after_drain" in b:
        rows.append(
            (
                "   drain after resume",
                f"peak {mib(b['rss_peak_drain']):.1f}  after {mib(b['rss_after_drain']):.1f} MiB"
                f"  (+{mib(max(b['rss_peak_drain'], b['rss_after_drain']) - base):.1f})",
                f"drained at {fmt_rate(b['drain_rate'])}/s",
            )
        )
        rows.append(
            (
                "   while paused",
                f"{b['on_disk_when_paused']:,} on disk, {b['in_memory_when_paused']} in memory",
                f"emitted at {fmt_rate(b['emit_rate'])}/s",
            )
        )
    if b.get("timed_out") and b.get("drain_elapsed_s"):
        drained, elapsed = b.get("drained", 0), b["drain_elapsed_s"]
        rows.append(
            (
                "   drain after resume (TIMEOUT)",
                f"{drained:,} of {b['items']:,} in {elapsed:.1f} s "
                f"({fmt_rate(drained / elapsed)}/s); peak {mib(b['rss_peak_drain']):.1f} MiB",
                "",
            )
        )
    growth = b.get("growth")
    if growth is not None:
        rows.append(("   growth (highest - before)", f"{mib(growth):.1f} MiB", ""))
    return rows


def render_profile(p: Json) -> list[str]:
    hs = p.get("hotspots")
    if not hs:
        return [f"profile: {p.get('error', 'no data')}"]
    lines = [
        f"profile (cProfile, N={p['n']:,}, {hs['total_s']:.2f} s profiled, "
        f"{hs.get('idle_s', 0):.2f} s of it idle in epoll"
        + (", TIMED OUT" if p.get("timed_out") else "")
        + f"; stats in {p['profile_path']})",
        "  by own time:",
    ]
    for r in hs["by_own"]:
        lines.append(
            f"   {r['own_s']:8.3f} s own {r['cum_s']:8.3f} s cum {r['calls']:>10,}  {r['where']}"
        )
    lines.append("  by cumulative time (mediaflow/ only):")
    for r in hs["by_cum_engine"]:
        lines.append(
            f"   {r['cum_s']:8.3f} s cum {r['own_s']:8.3f} s own {r['calls']:>10,}  {r['where']}"
        )
    return lines


def fmt_s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def fmt_target(t: Json) -> str:
    value = t["value"]
    if value is None:
        return "—"
    name: str = t["name"]
    if name.startswith("p99"):
        return fmt_ms(value)
    if name.startswith("RSS"):
        return f"{mib(value):.1f} MiB"
    if "/ Pipecat" in name:
        return fmt_ratio(value)
    return f"{fmt_rate(value)}/s"


def table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns, two spaces apart."""
    columns = max((len(r) for r in rows), default=0)
    widths = [max((len(r[i]) for r in rows if i < len(r)), default=0) for i in range(columns)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)).rstrip() for r in rows
    ]
