"""``python -m bench.emissions --queue redis://host:port/db``: the Redis backend.

The same mediaflow measurements as without ``--queue`` (:mod:`bench.emissions`:
the end-to-end durable emissions/s and the emit → consumer-start latency), on a
``FlowSession(queue_url=...)`` with a fresh key prefix per measurement (the keys
are deleted afterwards), and the raw redis-py peer (:mod:`bench.emissions.redis_peer`) on
the same server in the same run, interleaved rep by rep so drift on a noisy
machine hits both sides of the ratio alike. Target: mediaflow's median rate at
least ``TARGET_VS_RAW`` of the peer's.

Each mediaflow run also notes what the server spent (``INFO commandstats``
before and after: server-wide, so another client of the same Redis shows up).
``--profile`` adds one run with each script call timed on the client and every
command logged with its server time (SLOWLOG at threshold 0, settings restored),
and one cProfile run, so Python time and time waiting on Redis can be told apart.
The backlog RSS, Pipecat, ``asyncio.Queue`` and raw SQLite lines are the SQLite
bench's: run it without ``--queue`` for them.
"""

from __future__ import annotations

import argparse
import contextvars
import inspect
import os
import platform
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench._lib.common import Json, best_and_median, fmt_ms, fmt_rate, loop_name, verdict
from bench._lib.redis_tools import (
    RedisTarget,
    ScriptLog,
    commandstats,
    commandstats_delta,
    forget_prefix,
    server_info,
)
from bench.emissions.child import child_throughput
from bench.emissions.render import fmt_s, render_profile, table
from bench.emissions.report import Report, anomalies, delivery_checks, run_measure
from mediaflow.queue import WorkQueue

TARGET_VS_RAW = 0.5
# Commands the bench itself sends, and the scripts' total (their commands are listed).
BENCH_COMMANDS = frozenset(
    {"evalsha", "info", "scan", "unlink", "slowlog|get", "slowlog|reset", "config|get",
     "config|set", "hello", "client|setinfo"}
)  # fmt: skip


# -- in the child ------------------------------------------------------------------------


def child_scripts(n: int, timeout_s: float, queue_url: str) -> Json:
    """A throughput run with every call the queue makes timed on the client, at
    redis-py's boundary (a script object's call, a plain command), and named after
    the queue operation that made it (the public methods of the queue's roles, which
    the session's queue is wrapped in): calls and seconds awaited per operation and
    script (a script sent by several is named by all: ``claim|reclaim``) and per
    plain command, and which operation sends each script (by SHA1, as the server's
    log names it). mediaflow's internals are not touched. The awaits
    overlap other work of the event loop."""
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

    operation: contextvars.ContextVar[str] = contextvars.ContextVar("operation", default="?")
    script_ops: dict[str, set[str]] = {}
    waits: dict[str, list[float]] = {}
    call_script, execute = AsyncScript.__call__, Redis.execute_command

    def note(name: str, started: float) -> None:
        entry = waits.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += time.perf_counter() - started

    async def timed_script(self: AsyncScript, *args: Any, **kwargs: Any) -> Any:
        op = operation.get()
        script_ops.setdefault(self.sha, set()).add(op)
        started = time.perf_counter()
        try:
            return await call_script(self, *args, **kwargs)
        finally:
            note(self.sha, started)  # named once every operation sending it is known

    async def timed_execute(self: Redis, *args: Any, **kwargs: Any) -> Any:
        if str(args[0]).upper() in ("EVALSHA", "EVAL", "SCRIPT LOAD"):  # timed as scripts
            return await execute(self, *args, **kwargs)  # type: ignore[no-untyped-call]
        started = time.perf_counter()
        try:
            return await execute(self, *args, **kwargs)  # type: ignore[no-untyped-call]
        finally:
            note(str(args[0]), started)

    AsyncScript.__call__ = timed_script  # type: ignore[method-assign]
    Redis.execute_command = timed_execute  # type: ignore[method-assign]
    cpu = time.process_time()
    result = child_throughput(n, timeout_s, queue_url, hook=lambda q: named_calls(q, operation))
    result["cpu_s"] = time.process_time() - cpu
    names = {sha: "|".join(sorted(ops)) for sha, ops in script_ops.items()}
    client: dict[str, Json] = {}
    for key, (calls, seconds) in waits.items():
        entry = client.setdefault(names.get(key, key), {"calls": 0, "wait_s": 0.0})
        entry["calls"] += int(calls)
        entry["wait_s"] += seconds
    result["client_waits"] = client
    result["script_names"] = names
    return result


def named_calls(queue: WorkQueue, operation: contextvars.ContextVar[str]) -> WorkQueue:
    """``queue`` with each coroutine method of the public queue roles
    (:class:`~mediaflow.queue.WorkQueue`) setting ``operation`` to its name while it runs."""
    for name in dir(WorkQueue):
        method = getattr(queue, name, None)
        if name.startswith("_") or not inspect.iscoroutinefunction(method):
            continue

        def wrap(method: Callable[..., Awaitable[Any]], name: str) -> Callable[..., Any]:
            async def named(*args: Any, **kwargs: Any) -> Any:
                token = operation.set(name)
                try:
                    return await method(*args, **kwargs)
                finally:
                    operation.reset(token)

            return named

        setattr(queue, name, wrap(method, name))
    return queue


# -- in the parent --------------------------------------------------------------------------


def measure_on(
    report: Report,
    target: RedisTarget,
    key: str,
    name: str,
    args: Json,
    budget_s: float,
    *,
    script_log: bool = False,
) -> None:
    """One child on a fresh prefix; the server's command counters (and, with
    ``script_log``, its per-script times) go into the result as ``server``."""
    prefix, url = target.with_prefix(key)
    before = commandstats(target)
    log = ScriptLog(target)
    if script_log:
        with log.recording():
            run = run_measure(report, key, name, {**args, "queue_url": url}, budget_s)
    else:
        run = run_measure(report, key, name, {**args, "queue_url": url}, budget_s)
    delta = commandstats_delta(before, commandstats(target))
    forget_prefix(target, prefix)
    if run.result is not None:
        run.result["server"] = {
            "commands": delta,
            "scripts": log.named(run.result.get("script_names") or {}),
            "other": log.other,
            "slowlog_truncated": log.truncated,
        }


def collect(args: argparse.Namespace, target: RedisTarget) -> Report:
    report = Report(meta=meta(args, target))
    skip = set(args.skip)
    mf_args = {"n": args.n, "timeout_s": args.timeout}
    for _rep in range(args.reps):
        measure_on(report, target, "throughput", "throughput", mf_args, args.timeout)
        run_measure(
            report,
            "redis_raw",
            "redis_raw",
            {"url": target.url, "n": args.n, "reps": 1, "timeout_s": args.timeout},
            args.timeout,
        )
    if "latency" not in skip:
        budget = args.latency_seconds + args.timeout
        lat_args = {"rate": args.latency_rate, "seconds": args.latency_seconds, "timeout_s": budget}
        measure_on(report, target, "latency", "latency", lat_args, budget)
    if args.profile:
        n = args.profile_n or min(args.n, 20_000)
        measure_on(report, target, "scripts", "redis_scripts", {**mf_args, "n": n}, args.timeout,
                   script_log=True)  # fmt: skip
        prof_args = {"n": n, "timeout_s": args.timeout, "out": args.profile_out, "top": args.top}
        measure_on(report, target, "profile", "profile", prof_args, args.timeout)
    return report


def meta(args: argparse.Namespace, target: RedisTarget) -> Json:
    import redis

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loop": loop_name(),
        "redis": server_info(target),
        "redis_py": redis.__version__,
        "url": target.url,
        "n": args.n,
        "reps": args.reps,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# -- summarising ----------------------------------------------------------------------------


def spread(rates: list[float]) -> Json:
    best, median = best_and_median(rates)
    if not rates:
        return {"rates": [], "best": None, "median": None, "min": None, "spread": None}
    low = min(rates)
    return {
        "rates": rates,
        "best": best,
        "median": median,
        "min": low,
        "spread": (best - low) / median if median else None,
    }


def server_per_item(run: Json) -> Json | None:
    """Server time per emission from the command counters of one run."""
    commands = (run.get("server") or {}).get("commands") or {}
    if not commands or not run.get("n"):
        return None
    calls, usec = commands.get("evalsha", (0, 0))
    return {"evalsha_calls": calls, "script_us": usec / run["n"]}


def summarise(report: Report) -> Json:
    out: Json = {"meta": report.meta, "notes": list(report.notes)}
    mf_done = report.complete("throughput")
    out["mediaflow"] = {
        **spread([r["rate"] for r in mf_done]),
        "runs": report.results("throughput"),
    }
    raw_done = report.complete("redis_raw")
    out["raw"] = {**spread([x for r in raw_done for x in r["rates"]]), "runs": raw_done}
    pairs = [
        a["rate"] / b["rates"][0]
        for a, b in zip(report.results("throughput"), report.results("redis_raw"), strict=False)
        if "rate" in a and b.get("rates")
    ]
    mf_median, raw_median = out["mediaflow"]["median"], out["raw"]["median"]
    out["ratio"] = {
        "median": mf_median / raw_median if mf_median and raw_median else None,
        "per_rep": pairs,
        "min": min(pairs, default=None),
        "max": max(pairs, default=None),
    }
    lat = report.results("latency")
    out["latency"] = lat[0] if lat else None
    scripts = report.results("scripts")
    out["scripts"] = scripts[0] if scripts else None
    prof = report.results("profile")
    out["profile"] = prof[0] if prof else None
    value = out["ratio"]["median"]
    out["targets"] = [
        {
            "name": "mediaflow / raw redis-py (medians)",
            "target": f"≥ {TARGET_VS_RAW:.0%}",
            "value": value,
            "ok": None if value is None else value >= TARGET_VS_RAW,
        }
    ]
    checks = delivery_checks(report, {"backlog": None})
    for index, r in enumerate(raw_done, 1):
        for run in r.get("runs", []):
            if run["acked"] != run["n"] or run["out_of_order"] or run["duplicates"]:
                checks.append(f"raw redis-py run {index}: {run}")
    out["checks"] = checks
    out["anomalies"] = anomalies(report)
    return out


# -- the table ----------------------------------------------------------------------------


def fmt_spread(s: Json, unit: str) -> str:
    if s["median"] is None:
        return "no complete run"
    return (
        f"median {fmt_rate(s['median'])} {unit}  (min {fmt_rate(s['min'])}, "
        f"max {fmt_rate(s['best'])}; spread {s['spread']:.0%})"
    )


def render(s: Json) -> str:
    m = s["meta"]
    server = m["redis"]
    lines = [
        f"mediaflow durable emissions — Redis backend ({m['url']}, Redis {server['version']})"
        f"   N={m['n']:,}, {m['reps']} runs",
        f"Python {m['python']} on {m['loop']}, redis-py {m['redis_py']}, {m['cpus']} CPUs, "
        f"{m['platform']}, {m['started_at']}",
        "",
    ]
    rows: list[tuple[str, ...]] = []
    mf, raw, ratio = s["mediaflow"], s["raw"], s["ratio"]
    rows.append(("1. mediaflow durable emissions/s", fmt_spread(mf, "/s"), ""))
    for r in mf["runs"]:
        if "rate" not in r:
            rows.append(("   run", f"did not finish: {r.get('error') or r}", ""))
            continue
        per = server_per_item(r)
        server_note = (
            f"server: {per['evalsha_calls']:,} scripts, {per['script_us']:.1f} µs/emission"
            if per
            else ""
        )
        rows.append(
            (
                "   run",
                f"{fmt_rate(r['rate'])}/s  (source done {r['source_s']:.2f} s, "
                f"all consumed {fmt_s(r.get('all_consumed_s'))}, "
                f"idle {r['idle_s']:.2f} s)",
                server_note,
            )
        )
    rows.append(("2. raw redis-py XADD → XREADGROUP+XACK", fmt_spread(raw, "/s"), ""))
    for r in raw["runs"]:
        rows.append(("   run", f"{fmt_rate(r['rates'][0])}/s", ""))
    if ratio["median"] is not None:
        per_rep = "  ".join(f"{x:.0%}" for x in ratio["per_rep"])
        rows.append(
            (
                "   mediaflow / raw (medians)",
                f"{ratio['median']:.0%}",
                f"run by run: {per_rep} (min {ratio['min']:.0%}, max {ratio['max']:.0%})",
            )
        )
    rows.extend(latency_rows(s["latency"]))
    lines.extend(table(rows))
    lines.append("")
    lines.append("targets")
    lines.extend(
        table(
            [
                (
                    f"   {t['name']}",
                    "—" if t["value"] is None else f"{t['value']:.0%}",
                    f"target {t['target']}",
                    verdict(t["ok"]),
                )
                for t in s["targets"]
            ]
        )
    )
    lines.append("")
    if s["checks"]:
        lines.append("delivery checks: PROBLEMS")
        lines.extend(f"   - {line}" for line in s["checks"])
    else:
        lines.append("delivery checks: every seq consumed exactly once, in order (both sides)")
    lines.extend(f"note: {note}" for note in s["notes"])
    for a in s["anomalies"]:
        lines.append(f"anomaly in {a['measure']}: {a['error'] or ''}")
        lines.extend(f"   | {line}" for line in a["stderr"][:20])
    if s["scripts"]:
        lines.append("")
        lines.extend(script_rows(s["scripts"]))
    if s["profile"]:
        lines.append("")
        lines.extend(render_profile(s["profile"]))
    return "\n".join(lines)


def latency_rows(lat: Json | None) -> list[tuple[str, ...]]:
    if lat is None:
        return [("3. emit→consumer latency", "skipped", "")]
    if "error" in lat:
        return [("3. emit→consumer latency", f"error: {lat['error']}", "")]
    return [
        (
            f"3. emit→consumer latency @ {lat['rate']:,.0f}/s",
            f"p50 {fmt_ms(lat['p50_s'])}  p99 {fmt_ms(lat['p99_s'])}  max {fmt_ms(lat['max_s'])}",
            f"{lat['samples']:,} samples, source achieved {lat['achieved_rate']:,.0f}/s"
            + ("  TIMEOUT" if lat.get("timed_out") else ""),
        ),
        (
            "   emit() call itself",
            f"p50 {fmt_ms(lat['emit_p50_s'])}  p99 {fmt_ms(lat['emit_p99_s'])}  "
            f"max {fmt_ms(lat['emit_max_s'])}",
            "",
        ),
    ]


def script_rows(r: Json) -> list[str]:
    """Where one run's time went: the process's CPU, and per script the calls, the
    time the client awaited them and the time the server spent in them."""
    if "rate" not in r:
        return [f"scripts: {r.get('error', 'no data')}"]
    n, wall = r["n"], r["idle_s"]
    server = r.get("server") or {}
    scripts: dict[str, tuple[int, int]] = server.get("scripts") or {}
    server_s = sum(u for _c, u in scripts.values()) / 1e6
    lines = [
        f"where the time goes (one run, N={n:,}, {fmt_rate(r['rate'])}/s, every command "
        "logged by the server, script calls timed on the client):",
        f"   wall {wall:.2f} s; this process's CPU {r['cpu_s']:.2f} s (start and stop "
        f"included); Redis in scripts {server_s:.2f} s "
        f"({server_s / n * 1e6:.1f} µs per emission)"
        + ("; SLOWLOG FULL, server times partial" if server.get("slowlog_truncated") else ""),
    ]
    waits: dict[str, Json] = r.get("client_waits") or {}
    rows = [("   script / command", "calls", "client awaited", "server", "server µs/call")]
    for name in sorted(waits, key=lambda k: waits[k]["wait_s"], reverse=True):
        w = waits[name]
        calls, usec = scripts.get(name, server.get("other", {}).get(name.upper(), (0, 0)))
        rows.append(
            (
                f"   {name}",
                f"{w['calls']:,}",
                f"{w['wait_s']:.3f} s",
                f"{usec / 1e6:.3f} s",
                f"{usec / calls:.0f}" if calls else "—",
            )
        )
    lines.extend(table(rows))
    inner = (server.get("commands") or {}).items()
    top = sorted(((u, c, k) for k, (c, u) in inner if k not in BENCH_COMMANDS), reverse=True)[:8]
    lines.append(
        "   commands, the scripts' own included (INFO commandstats): "
        + ", ".join(f"{k} {c:,} calls {u / 1000:.0f} ms" for u, c, k in top)
    )
    return lines
