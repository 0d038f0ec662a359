"""The measurements of :mod:`bench.emissions`, each run in a child process of its own.

``python -m bench.emissions --child NAME`` reaches these through
:func:`bench.emissions.main.child_main`: the end-to-end throughput (and the same run
under cProfile, summed up by :func:`hotspots`), the emit → consumer-start
latency, and RSS over a backlog. Each runs its flow in a fresh temporary data
directory under a :class:`~bench._lib.common.Watchdog` that reports what was measured
so far if it overruns. Apart from the nodes (what runs inside mediaflow) and from
the parent (what plans and judges); the Redis backend's children reuse
:func:`child_throughput`, :func:`child_latency` and :func:`child_profile` with a
``queue_url``.
"""

from __future__ import annotations

import asyncio
import cProfile
import math
import os
import pstats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._lib.common import REPO_ROOT, Json, Watchdog, percentile, rss_bytes, run_async
from bench.emissions.nodes import (
    FLOW,
    BacklogProbe,
    BacklogSink,
    BacklogSource,
    CountingSink,
    CountingSource,
    LatencyProbe,
    LatencySink,
    PacedSource,
    Probe,
    in_memory,
    two_stage,
)
from mediaflow import EngineSettings, FlowSession
from mediaflow.queue import WorkQueue, open_queue

QueueHook = Callable[[WorkQueue], WorkQueue]


async def _throughput(
    probe: Probe, data_dir: Path, queue_url: str | None = None, hook: QueueHook | None = None
) -> Json:
    """One throughput run; ``hook`` gets the session's queue (opened here) to wrap."""
    flow = two_stage(CountingSource(probe), CountingSink(probe)).build()
    settings = EngineSettings.from_env()
    queue = None
    if hook is not None:
        queue = hook(open_queue(queue_url, data_dir, sqlite_sync=settings.sqlite_sync))
    session = FlowSession(flow, data_dir, queue_url=queue_url, queue=queue, settings=settings)
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
        node_buffer=session.settings.node_buffer,  # the setting it ran with
        queue_stats={
            "enqueued": stats.enqueued,
            "acked": stats.acked,
            "redelivered": stats.redelivered,
            "dead_lettered": stats.dead_lettered,
            "backlog": stats.backlog,
        },
    )
    return result


def child_throughput(
    n: int, timeout_s: float, queue_url: str | None = None, hook: QueueHook | None = None
) -> Json:
    probe = Probe(n)
    with (
        tempfile.TemporaryDirectory(prefix="bench-mf-") as tmp,
        Watchdog(timeout_s, probe.to_json),
    ):
        return run_async(_throughput(probe, Path(tmp), queue_url, hook))


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
    session = FlowSession(flow, data_dir, queue_url=queue_url, settings=EngineSettings.from_env())
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
    session = FlowSession(
        two_stage(BacklogSource(probe), BacklogSink(probe)).build(),
        data_dir,
        settings=EngineSettings.from_env(),
    )
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
