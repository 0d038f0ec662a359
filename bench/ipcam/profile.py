"""Where a mediaflow phase's time goes: CPU per thread kind, and what the event loop waits on.

Two looks from outside the process over the same window (``--profile``):

- ``/proc/PID/task/TID/stat`` at its start and end (``bench._lib.threads.thread_cpu``):
  the exact CPU of every thread, summed per kind by the Python name py-spy reports
  (``input rtsp://…`` capture threads, ``segments …`` and ``pictures …`` lanes, the
  ``mediaflow-io_N`` pool, ``MainThread``: the event loop); threads py-spy never named
  are native (FFmpeg's);
- ``py-spy record --threads --idle --nonblocking`` (the process is never paused): the
  event loop thread's samples, idle ones included, by their innermost frame. A loop
  that spends its wall time in a blocking call (a file system call, a SQLite write, a
  lock) rather than in ``Runner.run`` (uvloop's own loop, waiting for events) is late
  for everything else: capture, lane slots, HTTP. :func:`main_thread_wall` gives those
  shares; :func:`parse` is pure.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench._lib.threads import py_spy, thread_cpu, window_cpu

THREAD = re.compile(r"^thread \((\d+)\): ([^;]*)")
NATIVE = "native (unnamed: FFmpeg's)"
MAIN = "MainThread"


def kind_of(name: str) -> str:
    """A thread's kind: its Python name without the device URL or the pool index."""
    name = re.sub(r" (rtsp|file|lavfi)\S*", "", name)
    return re.sub(r"_\d+$", "_N", name)


@dataclass
class Samples:
    names: dict[int, str] = field(default_factory=dict)  # tid -> Python thread name
    main: Counter[str] = field(default_factory=Counter)  # innermost frame -> samples


def parse(text: str) -> Samples:
    """``py-spy record --threads --format raw`` output: thread names, and the main
    thread's samples by innermost frame (``function (file:line)``). Pure."""
    found = Samples()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        head = THREAD.match(stack)
        if head is None or not count.isdigit():
            continue
        found.names[int(head.group(1))] = head.group(2)
        frames = stack.split(";")[1:]
        if head.group(2) == MAIN and frames:
            found.main[frames[-1]] += int(count)
    return found


@dataclass(frozen=True)
class Profile:
    seconds: float
    cores: dict[str, float]  # thread kind -> cores
    main_wall: dict[str, float]  # innermost frame -> share of the loop thread's wall time

    def lines(self, top: int = 12) -> list[str]:
        out = [f"CPU by thread kind over {self.seconds:.0f} s (cores, exact from /proc):"]
        for kind, used in sorted(self.cores.items(), key=lambda item: -item[1]):
            out.append(f"  {used:6.3f}  {kind}")
        out.append("the event loop thread's wall time by innermost frame (py-spy --idle):")
        for frame, share in sorted(self.main_wall.items(), key=lambda item: -item[1])[:top]:
            out.append(f"  {share:6.1%}  {frame}")
        return out


def main_thread_wall(samples: Samples) -> dict[str, float]:
    total = sum(samples.main.values())
    return {frame: n / total for frame, n in samples.main.items()} if total else {}


def profile(pid: int, seconds: float, out: Path) -> Profile:
    """Look at ``pid`` for ``seconds`` (module doc); blocks that long. Raises
    ``RuntimeError`` if py-spy is missing or fails, ``OSError`` if ``pid`` is gone."""
    command = py_spy()
    if command is None:
        raise RuntimeError("py-spy is not installed (pip install -e '.[bench]')")
    arguments = ["record", "--pid", str(pid), "--duration", f"{seconds:.0f}", "--rate", "100"]
    arguments += ["--format", "raw", "--output", str(out), "--nonblocking", "--threads", "--idle"]
    start, before = time.monotonic(), thread_cpu(pid)
    done = subprocess.run(
        [command, *arguments], capture_output=True, text=True, timeout=seconds + 60, check=False
    )
    used, span = window_cpu(before, thread_cpu(pid)), time.monotonic() - start
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"py-spy failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    samples = parse(out.read_text())
    cores: Counter[str] = Counter()
    for tid, cpu in used.items():
        name = samples.names.get(tid)
        cores[NATIVE if name is None else kind_of(name)] += cpu / span
    return Profile(span, dict(cores), main_thread_wall(samples))
