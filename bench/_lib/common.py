"""Helpers shared by the benchmarks: memory, statistics, child processes, a watchdog.

Every measurement runs in a child process of its own (a fresh interpreter and a
fresh temporary data directory), so one measurement's heap, imports (Pipecat
pulls in a lot) or stuck event loop cannot colour the next. A child prints one
result line, ``RESULT_MARK`` followed by JSON, on stdout; everything else it
writes (logs, tracebacks) goes to stderr, which the parent keeps for the report.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._lib.loop import loop_name as loop_name
from bench._lib.loop import run_async as run_async

RESULT_MARK = "@@bench-result "
# Exit status of a child whose watchdog fired (same as coreutils' timeout).
TIMED_OUT = 124
MIB = 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parents[2]

Json = dict[str, Any]


# -- memory --------------------------------------------------------------------


def rss_bytes() -> int:
    """Resident set size of this process now (not the peak)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            resident_pages = int(fh.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import psutil  # only where /proc is missing

        return int(psutil.Process().memory_info().rss)


def mib(n_bytes: float) -> float:
    return n_bytes / MIB


# -- statistics ----------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of already sorted values, nearest-rank."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def best_and_median(rates: Sequence[float]) -> tuple[float, float]:
    if not rates:
        return math.nan, math.nan
    return max(rates), statistics.median(rates)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


# -- formatting ------------------------------------------------------------------


def fmt_rate(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:,.0f}"


def fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}x"


def fmt_ms(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "—"
    return f"{seconds * 1000:.2f} ms"


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


# -- child processes -------------------------------------------------------------


@dataclass
class ChildRun:
    """What one child process gave back."""

    name: str
    result: Json | None
    returncode: int | None
    wall_s: float
    stderr: str
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def timed_out(self) -> bool:
        return self.returncode == TIMED_OUT or (
            self.result is not None and bool(self.result.get("timed_out"))
        )


def run_child(
    module: str, name: str, args: Json, *, hard_timeout_s: float, env: dict[str, str] | None = None
) -> ChildRun:
    """Run ``python -m module --child name --child-args JSON`` from the repo root.

    ``hard_timeout_s`` is a last resort (the child's own watchdog should fire
    first and still report what it measured); past it the child is killed.
    """
    cmd = [sys.executable, "-m", module, "--child", name, "--child-args", json.dumps(args)]
    child_env = {**os.environ, **(env or {})}
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO_ROOT,
            env=child_env,
            capture_output=True,
            text=True,
            timeout=hard_timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        return ChildRun(
            name,
            parse_result(stdout),
            None,
            time.perf_counter() - started,
            stderr or "",
            error=f"killed after {hard_timeout_s:.0f} s (its watchdog did not fire)",
        )
    wall = time.perf_counter() - started
    result = parse_result(proc.stdout)
    error = None
    if result is None:
        error = f"exit status {proc.returncode}, no result"
    elif "error" in result:
        error = str(result["error"])
    return ChildRun(name, result, proc.returncode, wall, proc.stderr, error=error)


def measure_child(
    module: str, name: str, args: Json, *, timeout_s: float, hide: tuple[str, ...] = ()
) -> Json:
    """One measurement in a child (:func:`run_child`): its result line, with the
    arguments and result (less the ``hide`` keys) printed to stderr as progress.

    Raises RuntimeError, with the child's error and the tail of its stderr, when
    the child gave no result or reported an error.
    """
    run = run_child(module, name, args, hard_timeout_s=timeout_s)
    if run.result is None or run.error:
        raise RuntimeError(f"{name} {args}: {run.error}\n{run.stderr[-3000:]}")

    def shown(values: Json) -> str:
        return json.dumps({k: v for k, v in values.items() if k not in hide})

    print(f"  {name} {shown(args)}: {shown(run.result)} ({run.wall_s:.0f} s)", file=sys.stderr)
    return run.result


def parse_result(stdout: str) -> Json | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            loaded = json.loads(line[len(RESULT_MARK) :])
            return loaded if isinstance(loaded, dict) else None
    return None


def emit_result(result: Json) -> None:
    """Print the child's result line (flushed; safe to call from any thread once)."""
    os.write(1, (RESULT_MARK + json.dumps(result) + "\n").encode())


def notable_stderr(stderr: str, limit: int = 40) -> list[str]:
    """Lines of a child's stderr worth showing: tracebacks, errors and warnings,
    each traceback kept whole up to ``limit`` lines in all."""
    lines = stderr.splitlines()
    keep: list[str] = []
    in_traceback = False
    for line in lines:
        if line.startswith("Traceback"):
            in_traceback = True
        lowered = line.lower()
        if in_traceback or "error" in lowered or "warning" in lowered or "exception" in lowered:
            keep.append(line)
        if in_traceback and line and not line.startswith((" ", "Traceback")):
            in_traceback = False  # the exception line ends the traceback
        if len(keep) >= limit:
            keep.append(f"... ({len(lines)} lines of stderr in all)")
            break
    return keep


# -- the child's watchdog ------------------------------------------------------------


class Watchdog:
    """Ends a child that overruns its budget, after reporting what it measured so far.

    A plain thread, not an asyncio timer: a node that never yields the event
    loop (a source whose ``emit`` completes without suspending) would keep an
    asyncio timeout from ever firing.
    """

    def __init__(self, seconds: float, partial: Callable[[], Json]) -> None:
        self._partial = partial
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self.seconds = seconds

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        try:
            result = self._partial()
        except Exception as exc:  # report, whatever the measurement's state
            result = {"partial_error": repr(exc)}
        result["timed_out"] = True
        result["timeout_s"] = self.seconds
        emit_result(result)
        sys.stderr.flush()
        os._exit(TIMED_OUT)
