"""The GC bench's child: one sweep (or dry run) of a store copy, measured from inside.

Each sweep runs in a fresh ``python -m bench.gc --child sweep`` process (``bench.gc``'s
``main`` hands ``--child`` to :func:`child_main`), so that its peak RSS is its own:
the ``VmHWM`` after the sweep minus the RSS just before it. Kept apart from the
parent because none of it runs there, and because it patches ``mediaflow.gc``'s
internals (timers around the sweep's steps, ``asyncio.to_thread`` inlined for the
profiler), which only a throwaway process may do. With a profile it also lists the
hotspots (:func:`hotspots`).
"""

from __future__ import annotations

import asyncio
import cProfile
import functools
import inspect
import os
import pstats
import resource
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench._lib.common import REPO_ROOT, Json, Watchdog, emit_result, rss_bytes, run_async


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise LookupError(field_name)


def _reset_peak() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _time_phases(phases: dict[str, float]) -> None:
    """Wrap the sweep's steps with timers (by name; a step that is renamed is just not timed)."""
    from mediaflow.gc import sweep as sweep_mod

    steps = getattr(sweep_mod, "_Sweep", None)
    names = ("_expire_keeps", "_read_live", "_clean_orphans", "_collect", "_enforce_cap")
    for name in (*names, "_trim_records", "_count"):
        method = getattr(steps, name, None)
        if method is not None:
            setattr(steps, name, _timed(method, name.strip("_"), phases))
    pins = getattr(sweep_mod, "read_pins", None)
    if pins is not None:
        sweep_mod.read_pins = _timed(pins, "read_pins", phases)
    # Inside collect (and cap): reading candidate pages, and deleting batches.
    from mediaflow.gc import gcdb

    delete = getattr(gcdb.GcDb, "delete", None)
    if delete is not None:
        gcdb.GcDb.delete = _timed(delete, "collect/delete batches", phases)  # type: ignore[method-assign]
    pages = getattr(gcdb.GcDb, "_pages", None)
    if pages is not None:
        gcdb.GcDb._pages = _timed_iter(pages, "collect/candidate pages", phases)  # type: ignore[method-assign]


def _timed_iter(
    func: Callable[..., Iterator[Any]], name: str, phases: dict[str, float]
) -> Callable[..., Iterator[Any]]:
    """Time each step of the iterator ``func`` returns (not what the caller does in between)."""

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
        steps = func(*args, **kwargs)
        while True:
            started = time.perf_counter()
            try:
                value = next(steps)
            except StopIteration:
                return
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - started
            yield value

    return timed


def _timed(func: Callable[..., Any], name: str, phases: dict[str, float]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await func(*args, **kwargs)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - started

        return timed_async

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - started

    return timed


async def _inline_to_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    return func(*args, **kwargs)


def child_sweep(
    data_dir: str, dry_run: bool, timeout_s: float, profile_out: str | None = None, top: int = 25
) -> Json:
    from mediaflow.gc import GcSettings, sweep_artifacts
    from mediaflow.queue import SqliteQueue

    data = Path(data_dir)
    settings = GcSettings(grace_s=0.0, interval_s=0.0)
    phases: dict[str, float] = {}
    _time_phases(phases)
    profiler = cProfile.Profile() if profile_out else None
    if profiler is not None:
        # The sweep's blocking steps run in worker threads, which cProfile does not see.
        asyncio.to_thread = _inline_to_thread
    measured: Json = {}

    async def sweep() -> Json:
        queue = SqliteQueue.in_dir(data)
        try:
            measured["rss_before"] = rss_bytes()
            cpu_before = resource.getrusage(resource.RUSAGE_SELF)
            measured["peak_reset"] = _reset_peak()
            measured["hwm_before"] = _status_kib("VmHWM") * 1024
            started = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            report = await sweep_artifacts(data, queue, settings=settings, dry_run=dry_run)
            if profiler is not None:
                profiler.disable()
            measured["seconds"] = time.perf_counter() - started
            cpu_after = resource.getrusage(resource.RUSAGE_SELF)
            measured["cpu_user_s"] = cpu_after.ru_utime - cpu_before.ru_utime
            measured["cpu_sys_s"] = cpu_after.ru_stime - cpu_before.ru_stime
            measured["hwm_after"] = _status_kib("VmHWM") * 1024
            return report.to_json()
        finally:
            await queue.close()

    with Watchdog(timeout_s, lambda: dict(measured, phases=phases)):
        report = run_async(sweep())
    result: Json = {
        **measured,
        "rss_delta": measured["hwm_after"] - measured["rss_before"],
        "phases": phases,
        "report": report,
    }
    if profiler is not None and profile_out:
        profiler.dump_stats(profile_out)
        result["hotspots"] = hotspots(profile_out, top)
        result["profile_path"] = profile_out
    return result


def hotspots(prof_path: str, top: int) -> Json:
    stats = pstats.Stats(prof_path)
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    rows = [
        {"where": _where(func), "calls": nc, "own_s": tt, "cum_s": ct}
        for func, (_cc, nc, tt, ct, _callers) in table.items()
    ]
    return {
        "total_s": stats.total_tt,  # type: ignore[attr-defined]
        "by_own": sorted(rows, key=lambda r: r["own_s"], reverse=True)[:top],
        "by_cum": sorted(
            (r for r in rows if r["where"].startswith("mediaflow/")),
            key=lambda r: r["cum_s"],
            reverse=True,
        )[:top],
    }


def _where(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    root = str(REPO_ROOT) + os.sep
    stdlib = os.path.dirname(os.__file__) + os.sep
    if filename.startswith(root):
        filename = filename[len(root) :]
    elif filename.startswith(stdlib):
        filename = "<stdlib>/" + filename[len(stdlib) :]
    return f"{filename}:{line}({name})"


def child_main(name: str, args: Json) -> int:
    """Run one measurement and print its result line; stdout carries nothing else."""
    children: dict[str, Callable[..., Json]] = {"sweep": child_sweep}
    try:
        result = children[name](**args)
    except Exception as exc:
        import traceback

        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {exc}"}
    emit_result(result)
    return 0
