"""Durable emissions through mediaflow's embedded SQLite backend, against peers and
ceilings measured in the same run.

Run from the repository root (about 1-3 minutes)::

    python -m bench.emissions                 # the table
    python -m bench.emissions --json          # the same numbers as JSON on stdout
    python -m bench.emissions --profile       # also cProfile the end-to-end path once
    python -m bench.emissions --n 20000 --skip pipecat,backlog
    python -m bench.emissions --queue redis://127.0.0.1:6379/0   # the Redis backend

With ``--queue`` the throughput and latency measurements run on that Redis (a
fresh key prefix each) against raw redis-py on the same server: see
:mod:`bench._emissions_redis`. Without it, everything below is on SQLite.

Pipecat is optional (``pip install -e '.[bench]'``); without it its line says
``pipecat: unavailable (<reason>)`` and the rest still runs. Progress goes to
stderr. Every measurement runs in a child process of its own, with a fresh
temporary data directory, and a watchdog that reports what was measured so far
if the measurement overruns (``--timeout``).

What each number means (machines here are noisy: read the ratios first):

1. **durable emissions/s end to end**: a two-stage flow, a source node that
   ``await ctx.emit("value", {"seq": n})`` N times as fast as ``emit`` returns
   and a consumer node that does nothing. Timed from the source's first line
   until ``FlowSession.wait(until_idle=True)`` returns, i.e. every item was
   consumed *and acked* and the queue file holds nothing for the flow
   (``wait`` polls every 50 ms, so a short run is rounded up). N items divided
   by that time; ``--reps`` runs, best and median (targets use the median).
   The consumer also checks delivery: each seq exactly once, in order.
2. **emit → consumer-start latency**: a source paced on absolute deadlines at
   ``--latency-rate`` per second for ``--latency-seconds`` puts
   ``time.perf_counter()`` in each value just before ``emit``; the consumer
   records ``time.perf_counter() - emitted_at`` as its ``run`` starts (both run in
   one process: a monotonic clock, immune to wall-clock steps). p50 / p99 / max.
3. **RSS over a backlog**: the flow is paused right after it starts, a source
   emits ``--backlog-items`` values of about ``--backlog-payload`` bytes, so
   all of them wait on disk; RSS (``/proc/self/statm``) is sampled before the
   first emit, at each quarter, and (every 100 ms) while the flow drains after
   ``resume``. Growth = highest sample - first sample.
4. **peers and ceilings** (see :mod:`bench._peers`): the same two-stage
   pipeline on Pipecat (in memory, no durability, observers off; plus, for
   reference only, frames fed through ``PipelineWorker.queue_frame``); an
   ``asyncio.Queue`` hand-off between two tasks (the in-memory ceiling); raw
   SQLite in WAL mode with ``synchronous=NORMAL``: single-INSERT transactions
   per second (the ceiling for one durable emission per transaction) and
   claim+ack per second in batches of 256.

Targets printed next to the results: ≥ 25,000 durable emissions/s end to end
and ≥ 1.4x Pipecat's rate; p99 ≤ 5 ms at 1,000 emissions/s; RSS growth over
the backlog < 32 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import math
import os
import platform
import pstats
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

if __package__ in (None, ""):  # run as a file: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    REPO_ROOT,
    ChildRun,
    Json,
    Watchdog,
    best_and_median,
    emit_result,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    loop_name,
    mib,
    notable_stderr,
    percentile,
    ratio,
    rss_bytes,
    run_async,
    run_child,
    verdict,
)
from bench._peers import ASYNCIO_QUEUE_SIZE
from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.config import EngineSettings

MODULE = "bench.emissions"
FLOW = "emissions"

TARGET_RATE = 25_000.0
TARGET_VS_PIPECAT = 1.4
TARGET_P99_S = 0.005
TARGET_RSS_GROWTH = 32 * 1024 * 1024


# -- nodes -----------------------------------------------------------------------------
#
# Node instances are handed to FlowBuilder as they are, each holding the probe
# the measurement reads; FlowBuilder accepts an instance in place of a class.


@dataclass
class Probe:
    """What the nodes of one measurement saw. Written only from the event loop."""

    n: int
    emitted: int = 0
    runs: int = 0  # consumer runs, redeliveries included
    distinct: int = 0
    duplicates: int = 0
    redelivered_runs: int = 0  # runs with ctx.redelivery set
    order_regressions: int = 0  # runs whose seq is below the previous run's
    last_seq: int = -1
    started: float = 0.0  # perf_counter() at the source's first line
    source_done: float = 0.0
    all_consumed: float = 0.0  # when the last distinct seq was first consumed
    peak_in_memory: int = 0  # most items the consumer's line held (sampled every 64 runs)
    session: FlowSession | None = None
    seen: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self.seen = bytearray(self.n)

    def consumed(self, seq: int, redelivery: bool) -> None:
        self.runs += 1
        self.redelivered_runs += redelivery
        self.order_regressions += seq < self.last_seq
        self.last_seq = seq
        if 0 <= seq < self.n and not self.seen[seq]:
            self.seen[seq] = 1
            self.distinct += 1
            if self.distinct == self.n:
                self.all_consumed = time.perf_counter()
        else:
            self.duplicates += 1
        if self.runs % 64 == 0 and self.session is not None:
            held = in_memory(self.session)
            if held > self.peak_in_memory:
                self.peak_in_memory = held

    def to_json(self) -> Json:
        now = time.perf_counter()
        return {
            "n": self.n,
            "emitted": self.emitted,
            "consumer_runs": self.runs,
            "distinct": self.distinct,
            "duplicates": self.duplicates,
            "redelivered_runs": self.redelivered_runs,
            "order_regressions": self.order_regressions,
            "peak_in_memory": self.peak_in_memory,
            "source_s": (self.source_done or now) - self.started if self.started else None,
            "all_consumed_s": self.all_consumed - self.started if self.all_consumed else None,
            "elapsed_s": now - self.started if self.started else None,
        }


def in_memory(session: FlowSession) -> int:
    """Items the engine holds in memory for its busiest non-source node."""
    sources = {node.id for node in session.spec.sources()}
    lines = session.snapshot().lines
    return max((w + r for s, (w, r) in lines.items() if s.node not in sources), default=0)


class CountingSource(Node):
    """Emits ``{"seq": n}`` for n in range(N) as fast as ``emit`` returns."""

    outputs: ClassVar[Mapping[str, str]] = {"value": "json"}

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    async def run(self, ctx: Context) -> None:
        probe = self.probe
        probe.started = time.perf_counter()
        for seq in range(probe.n):
            await ctx.emit("value", {"seq": seq})
            probe.emitted += 1
        probe.source_done = time.perf_counter()


class CountingSink(Node):
    """The trivial consumer: notes the seq it got (and whether it is a redelivery)."""

    inputs: ClassVar[Mapping[str, str]] = {"value": "json"}

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    async def run(self, ctx: Context) -> None:
        self.probe.consumed(ctx.inputs["value"]["seq"], ctx.redelivery)


@dataclass
class LatencyProbe:
    rate: float
    seconds: float
    latencies: list[float] = field(default_factory=list)
    emit_costs: list[float] = field(default_factory=list)
    max_behind_s: float = 0.0
    emitted: int = 0
    started: float = 0.0
    finished: float = 0.0


class PacedSource(Node):
    """Emits at ``rate`` per second on absolute deadlines (no sleep drift): item k is
    due at start + k / rate; a late source does not sleep, it catches up."""

    outputs: ClassVar[Mapping[str, str]] = {"value": "json"}

    def __init__(self, probe: LatencyProbe) -> None:
        self.probe = probe

    async def run(self, ctx: Context) -> None:
        probe = self.probe
        loop = asyncio.get_running_loop()
        count = round(probe.rate * probe.seconds)
        start = loop.time()
        probe.started = time.perf_counter()
        for seq in range(count):
            due = start + seq / probe.rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                probe.max_behind_s = max(probe.max_behind_s, -delay)
            before = time.perf_counter()
            await ctx.emit("value", {"seq": seq, "emitted_at": time.perf_counter()})
            probe.emit_costs.append(time.perf_counter() - before)
            probe.emitted += 1
        probe.finished = time.perf_counter()


class LatencySink(Node):
    inputs: ClassVar[Mapping[str, str]] = {"value": "json"}

    def __init__(self, probe: LatencyProbe) -> None:
        self.probe = probe

    async def run(self, ctx: Context) -> None:
        self.probe.latencies.append(time.perf_counter() - ctx.inputs["value"]["emitted_at"])


@dataclass
class BacklogProbe:
    items: int
    payload: int
    marks: list[tuple[int, int]] = field(default_factory=list)  # (emitted, rss)
    emitted: int = 0
    consumed: int = 0
    consumed_while_paused: int = 0
    paused: bool = True
    source_done: asyncio.Event = field(default_factory=asyncio.Event)
    emit_s: float = 0.0
    drain_started: float = 0.0


class BacklogSource(Node):
    """Emits ``items`` values of about ``payload`` bytes of JSON; samples RSS before
    the first emit and after each quarter."""

    outputs: ClassVar[Mapping[str, str]] = {"value": "json"}

    def __init__(self, probe: BacklogProbe) -> None:
        self.probe = probe

    async def run(self, ctx: Context) -> None:
        probe = self.probe
        pad = "x" * max(0, probe.payload - 32)
        quarter = max(1, probe.items // 4)
        probe.marks.append((0, rss_bytes()))
        started = time.perf_counter()
        for seq in range(probe.items):
            await ctx.emit("value", {"seq": seq, "pad": pad})
            probe.emitted += 1
            if probe.emitted % quarter == 0 or probe.emitted == probe.items:
                probe.marks.append((probe.emitted, rss_bytes()))
        probe.emit_s = time.perf_counter() - started
        probe.source_done.set()


class BacklogSink(Node):
    inputs: ClassVar[Mapping[str, str]] = {"value": "json"}

    def __init__(self, probe: BacklogProbe) -> None:
        self.probe = probe

    async def run(self, ctx: Context) -> None:
        self.probe.consumed += 1
        self.probe.consumed_while_paused += self.probe.paused


# -- the measurements (each runs in a child process) -------------------------------------


def two_stage(source: Node, sink: Node) -> FlowBuilder:
    return (
        FlowBuilder(FLOW).add("source", source).add("sink", sink, inputs={"value": "source.value"})
    )


async def _throughput(probe: Probe, data_dir: Path, queue_url: str | None = None) -> Json:
    flow = two_stage(CountingSource(probe), CountingSink(probe)).build()
    session = FlowSession(flow, data_dir, queue_url=queue_url)
    probe.session = session
    await session.start()
    try:
        reason = await session.wait(until_idle=True)
        idle_at = time.perf_counter()
        stats = await session.queue.stats()
    finally:
        await session.stop()
    result = probe.to_json()
    elapsed = idle_at - probe.started
    result.update(
        reason=reason,
        idle_s=elapsed,
        rate=probe.n / elapsed,
        queue_stats={
            "enqueued": stats.enqueued,
            "acked": stats.acked,
            "redelivered": stats.redelivered,
            "dead_lettered": stats.dead_lettered,
            "backlog": stats.backlog,
        },
    )
    return result


def child_throughput(n: int, timeout_s: float, queue_url: str | None = None) -> Json:
    probe = Probe(n)
    with (
        tempfile.TemporaryDirectory(prefix="bench-mf-") as tmp,
        Watchdog(timeout_s, probe.to_json),
    ):
        return run_async(_throughput(probe, Path(tmp), queue_url))


def child_profile(
    n: int, timeout_s: float, out: str, top: int, queue_url: str | None = None
) -> Json:
    probe = Probe(n)
    profiler = cProfile.Profile()

    def partial() -> Json:
        profiler.disable()
        profiler.dump_stats(out)
        return {**probe.to_json(), "hotspots": hotspots(out, top), "profile_path": out}

    with tempfile.TemporaryDirectory(prefix="bench-prof-") as tmp, Watchdog(timeout_s, partial):
        profiler.enable()
        result = run_async(_throughput(probe, Path(tmp), queue_url))
        profiler.disable()
    profiler.dump_stats(out)
    result.update(hotspots=hotspots(out, top), profile_path=out)
    return result


def where(func: tuple[str, int, str]) -> str:
    """``path:line(name)``, paths shortened to the repo, the stdlib or site-packages."""
    filename, line, name = func
    if filename == "~":
        return name  # a built-in
    path = filename
    for prefix, label in (
        (str(REPO_ROOT) + os.sep, ""),
        (os.path.dirname(os.__file__) + os.sep, "<stdlib>/"),
    ):
        if path.startswith(prefix):
            path = label + path[len(prefix) :]
            break
    else:
        marker = "site-packages" + os.sep
        if marker in path:
            path = "<site>/" + path.split(marker, 1)[1]
    return f"{path}:{line}({name})"


def hotspots(prof_path: str, top: int) -> Json:
    stats = pstats.Stats(prof_path)
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total: float = stats.total_tt  # type: ignore[attr-defined]
    rows = [
        {"where": where(func), "calls": nc, "own_s": tt, "cum_s": ct}
        for func, (_cc, nc, tt, ct, _callers) in table.items()
    ]
    by_own = sorted(rows, key=lambda r: r["own_s"], reverse=True)[:top]
    engine = [r for r in rows if r["where"].startswith("mediaflow/")]
    by_cum = sorted(engine, key=lambda r: r["cum_s"], reverse=True)[:top]
    idle = sum(r["own_s"] for r in rows if "select.epoll" in r["where"])
    return {"total_s": total, "idle_s": idle, "by_own": by_own, "by_cum_engine": by_cum}


async def _latency(probe: LatencyProbe, data_dir: Path, queue_url: str | None = None) -> Json:
    flow = two_stage(PacedSource(probe), LatencySink(probe)).build()
    session = FlowSession(flow, data_dir, queue_url=queue_url)
    await session.start()
    try:
        reason = await session.wait(until_idle=True)
    finally:
        await session.stop()
    return {"reason": reason, **latency_summary(probe)}


def latency_summary(probe: LatencyProbe) -> Json:
    lat = sorted(probe.latencies)
    costs = sorted(probe.emit_costs)
    span = (probe.finished or time.perf_counter()) - probe.started if probe.started else math.nan
    return {
        "rate": probe.rate,
        "seconds": probe.seconds,
        "emitted": probe.emitted,
        "achieved_rate": probe.emitted / span if span else math.nan,
        "samples": len(lat),
        "p50_s": percentile(lat, 50),
        "p99_s": percentile(lat, 99),
        "max_s": lat[-1] if lat else math.nan,
        "emit_p50_s": percentile(costs, 50),
        "emit_p99_s": percentile(costs, 99),
        "emit_max_s": costs[-1] if costs else math.nan,
        "source_max_behind_s": probe.max_behind_s,
    }


def child_latency(
    rate: float, seconds: float, timeout_s: float, queue_url: str | None = None
) -> Json:
    probe = LatencyProbe(rate, seconds)
    with (
        tempfile.TemporaryDirectory(prefix="bench-lat-") as tmp,
        Watchdog(timeout_s, lambda: latency_summary(probe)),
    ):
        return run_async(_latency(probe, Path(tmp), queue_url))


async def _backlog(probe: BacklogProbe, data_dir: Path, drain_samples: list[int]) -> Json:
    session = FlowSession(two_stage(BacklogSource(probe), BacklogSink(probe)).build(), data_dir)
    await session.start()
    try:
        await session.pause()
        await probe.source_done.wait()
        on_disk = (await session.queue.backlog_flows()).get(FLOW, 0)
        held_paused = in_memory(session)
        probe.paused = False
        started = probe.drain_started = time.perf_counter()
        await session.resume()

        async def sample() -> None:
            while True:
                drain_samples.append(rss_bytes())
                await asyncio.sleep(0.1)

        sampler = asyncio.create_task(sample())
        try:
            reason = await session.wait(until_idle=True)
        finally:
            sampler.cancel()
        drain_s = time.perf_counter() - started
        after = rss_bytes()
    finally:
        await session.stop()
    return {
        **backlog_summary(probe, drain_samples),
        "reason": reason,
        "on_disk_when_paused": on_disk,
        "in_memory_when_paused": held_paused,
        "drain_s": drain_s,
        "drain_rate": probe.items / drain_s,
        "rss_after_drain": after,
    }


def backlog_summary(probe: BacklogProbe, drain_samples: list[int]) -> Json:
    marks = list(probe.marks)
    before = marks[0][1] if marks else 0
    peak_drain = max(drain_samples, default=0)
    highest = max([rss for _, rss in marks] + [peak_drain], default=0)
    draining = time.perf_counter() - probe.drain_started if probe.drain_started else None
    return {
        "drain_elapsed_s": draining,
        "drained": probe.consumed - probe.consumed_while_paused,
        "items": probe.items,
        "payload": probe.payload,
        "emitted": probe.emitted,
        "consumed": probe.consumed,
        "consumed_while_paused": probe.consumed_while_paused,
        "emit_rate": probe.items / probe.emit_s if probe.emit_s else None,
        "marks": marks,
        "rss_peak_drain": peak_drain,
        "growth": highest - before if marks else None,
    }


def child_backlog(items: int, payload: int, timeout_s: float) -> Json:
    probe = BacklogProbe(items, payload)
    samples: list[int] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-rss-") as tmp,
        Watchdog(timeout_s, lambda: backlog_summary(probe, samples)),
    ):
        return run_async(_backlog(probe, Path(tmp), samples))


def child_main(name: str, args: Json) -> int:
    """Run one measurement and print its result line; stdout carries nothing else."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from bench import _peers

    children: dict[str, Callable[..., Json]] = {
        "throughput": child_throughput,
        "profile": child_profile,
        "latency": child_latency,
        "backlog": child_backlog,
        "pipecat": _peers.measure_pipecat,
        "asyncio_queue": _peers.measure_asyncio_queue,
        "sqlite": _peers.measure_sqlite,
    }
    if name.startswith("redis_"):  # the --queue measurements; SQLite's children import none
        from bench import _emissions_redis, _redis_peer

        children["redis_raw"] = _redis_peer.measure_redis_raw
        children["redis_scripts"] = _emissions_redis.child_scripts
    try:
        result = children[name](**args)
    except Exception as exc:
        logging.getLogger("bench").exception("measurement %s failed", name)
        result = {"error": f"{type(exc).__name__}: {exc}"}
    emit_result(result)
    return 0


# -- the parent: plan, run, report ------------------------------------------------------


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


def collect(args: argparse.Namespace) -> Report:
    skip = set(args.skip)
    report = Report(meta=machine_meta(args))
    if "sqlite" not in skip:
        run_measure(report, "sqlite", "sqlite", {"n": args.sqlite_n, "reps": args.reps}, 120)
    # Interleave mediaflow's runs with the peers' so drift on a noisy machine
    # hits both sides of each ratio alike.
    mf_gave_up = False
    for rep in range(args.reps):
        if not mf_gave_up:
            run = run_measure(
                report,
                "throughput",
                "throughput",
                {"n": args.n, "timeout_s": args.timeout},
                args.timeout,
            )
            if run.timed_out or run.error:
                mf_gave_up = True
                if rep + 1 < args.reps:
                    report.notes.append(
                        f"mediaflow throughput: run {rep + 1} did not finish cleanly; "
                        f"the remaining {args.reps - rep - 1} run(s) were skipped"
                    )
        if "pipecat" not in skip:
            for key, shape in (("pipecat", "processors"), ("pipecat_queue_frame", "queue_frame")):
                run_measure(
                    report,
                    key,
                    "pipecat",
                    {"n": args.n, "reps": 1, "timeout_s": args.timeout, "shape": shape},
                    args.timeout + 60,
                )
        if "queue" not in skip:
            run_measure(report, "asyncio_queue", "asyncio_queue", {"n": args.n, "reps": 1}, 60)
    if "latency" not in skip:
        budget = args.latency_seconds + args.timeout
        run_measure(
            report,
            "latency",
            "latency",
            {"rate": args.latency_rate, "seconds": args.latency_seconds, "timeout_s": budget},
            budget,
        )
    if "backlog" not in skip:
        budget = args.timeout + 30
        run_measure(
            report,
            "backlog",
            "backlog",
            {"items": args.backlog_items, "payload": args.backlog_payload, "timeout_s": budget},
            budget,
        )
    if args.profile:
        profile_n = args.profile_n or min(args.n, 20_000)
        budget = args.timeout
        run_measure(
            report,
            "profile",
            "profile",
            {"n": profile_n, "timeout_s": budget, "out": args.profile_out, "top": args.top},
            budget,
        )
    return report


def machine_meta(args: argparse.Namespace) -> Json:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "loop": loop_name(),
        "n": args.n,
        "reps": args.reps,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


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

    qf_rates = [rate for r in report.complete("pipecat_queue_frame") for rate in r["rates"]]
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
    buffer = EngineSettings.from_env().node_buffer
    for index, r in enumerate(report.results("throughput"), 1):
        label = f"throughput run {index}"
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


# -- the table ------------------------------------------------------------------------------


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


# -- command line ----------------------------------------------------------------------------


SKIPPABLE = ("pipecat", "queue", "sqlite", "latency", "backlog")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.emissions",
        description="Durable emissions/s, latency and backlog RSS for mediaflow's SQLite "
        "backend, with Pipecat, asyncio.Queue and raw SQLite measured in the same run.",
    )
    p.add_argument("--n", type=int, default=50_000, help="emissions per throughput run")
    p.add_argument("--reps", type=int, default=3, help="throughput runs (best and median)")
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds one throughput run may take"
    )
    p.add_argument("--latency-rate", type=float, default=1000.0)
    p.add_argument("--latency-seconds", type=float, default=5.0)
    p.add_argument("--backlog-items", type=int, default=100_000)
    p.add_argument("--backlog-payload", type=int, default=1024, help="bytes of JSON per item")
    p.add_argument("--sqlite-n", type=int, default=100_000, help="rows per raw SQLite run")
    p.add_argument(
        "--skip",
        type=lambda text: [s for s in text.split(",") if s],
        default=[],
        help=f"comma-separated measurements to leave out: {', '.join(SKIPPABLE)}",
    )
    p.add_argument(
        "--queue",
        metavar="URL",
        help="measure mediaflow on this Redis (redis://host:port/db; a fresh key prefix per "
        "measurement) against raw redis-py on the same server, instead of SQLite",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--profile", action="store_true", help="cProfile one end-to-end run")
    p.add_argument("--profile-n", type=int, default=0, help="emissions profiled (min(N, 20k))")
    p.add_argument(
        "--profile-out",
        default=os.path.join(tempfile.gettempdir(), "mediaflow-emissions.prof"),
    )
    p.add_argument("--top", type=int, default=25, help="hotspots listed per ordering")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-args", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = set(args.skip) - set(SKIPPABLE)
    if unknown:
        p.error(f"--skip: unknown {', '.join(sorted(unknown))} (choose from {SKIPPABLE})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args.child, json.loads(args.child_args))
    started = time.perf_counter()
    if args.queue:
        from bench import _emissions_redis
        from bench._redis_tools import RedisTarget

        try:
            target = RedisTarget.parse(args.queue)
        except ValueError as exc:
            print(f"bench.emissions: {exc}", file=sys.stderr)
            return 2
        redis_summary = _emissions_redis.summarise(_emissions_redis.collect(args, target))
        redis_summary["meta"]["wall_s"] = time.perf_counter() - started
        if args.json:
            print(json.dumps(finite(redis_summary), indent=2, default=str, allow_nan=False))
        else:
            print(_emissions_redis.render(redis_summary))
        progress(f"done in {redis_summary['meta']['wall_s']:.0f} s")
        return 0
    summary = summarise(collect(args))
    summary["meta"]["wall_s"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(finite(summary), indent=2, default=str, allow_nan=False))
    else:
        print(render(summary))
    progress(f"done in {summary['meta']['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
