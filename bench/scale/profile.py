"""Where a scale run's CPU goes: exact CPU per thread, Python stacks to name it.

Two sources, both from outside the process:

- ``/proc/PID/task/TID/stat`` at the window's start and end: the CPU time of every
  OS thread, exact, native ones included (libx264's frame threads, FFmpeg's);
- ``py-spy record --threads --nonblocking`` through the window (the process is never
  paused, so the profile does not slow what it measures): each sample is a Python
  thread on a core, with its id, its Python name and its stack.

:func:`attribute` joins them. A thread whose Python name says its job (``jpeg …``,
``segments …``, ``input lavfi:…``, ``speech-asr3``, the SQLite queue's) gets its
exact CPU under that job. The event loop thread and the shared worker pools run
everything else, so their exact CPU is shared out by where their samples were
(:func:`area_of`: the innermost frame a rule names, so a JPEG save counts as the
store, not as the engine that called it). A thread py-spy never named, with CPU,
is native: x264's workers. Pure but for :func:`thread_cpu` and :func:`record`.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench._lib.threads import py_spy

THREAD_FRAME = re.compile(r"^thread \((\d+)\): (.*)$")

# (area, substrings of a frame's "function (file:line)"), tried innermost frame first.
AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JPEG encode (libjpeg-turbo)", ("connectors/_jpeg.py", "simplejpeg")),
    ("H.264 segments: encode and mux", ("connectors/_segments.py",)),
    ("cameras: capture and decode", ("devices/video_input.py",)),
    (
        "speech recognition (pocketsphinx)",
        ("nodes/speech", "nodes/recognizer", "nodes/pocketsphinx", "utterance"),
    ),
    ("recorder: clip mux", ("nodes/recorder",)),
    ("microphones: read and chunk", ("devices/audio", "connectors/_audio", "microphone.py")),
    ("store: hash, write, fsync", ("mediaflow/store/",)),
    ("queue: SQLite", ("mediaflow/queue/", "sqlite3")),
    ("GC and disk cap", ("mediaflow/gc/",)),
    ("HTTP: the bench's scrapes", ("mediaflow/server/", "aiohttp/", "prometheus_client")),
    ("engine: runner, reducer, journal", ("mediaflow/engine/", "mediaflow/node.py")),
    ("connectors: pacing, emitting", ("connectors/", "devices/")),
    ("event loop", ("asyncio/", "uvloop", "selectors")),
)
OTHER = "other Python"
HOSTS = "speech recognition (pocketsphinx, in its host processes)"
NATIVE = "native threads (x264 workers, FFmpeg), those that ended in the window too"
# Threads whose name says their job: (area, name prefixes).
NAMED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JPEG encode (libjpeg-turbo)", ("jpeg ",)),
    ("H.264 segments: encode and mux", ("segments ",)),
    ("cameras: capture and decode", ("input lavfi:", "input v4l2:", "input /dev/video")),
    ("microphones: read and chunk", ("input ",)),
    ("speech recognition (pocketsphinx)", ("speech-",)),
    ("queue: SQLite", ("mediaflow-sqlite",)),
)


def area_of(stack: str) -> str:
    """The area of one stack (``frame;frame;...``, outermost first)."""
    for frame in reversed(stack.split(";")):
        for area, marks in AREAS:
            if any(mark in frame for mark in marks):
                return area
    return OTHER


def named_area(name: str) -> str | None:
    """The area a thread's Python name gives it, or None (shared: the loop, pools)."""
    for area, prefixes in NAMED:
        if name.startswith(prefixes):
            return area
    return None


@dataclass
class Samples:
    """py-spy's raw output, by thread: its name, and its samples per area."""

    names: dict[int, str]
    areas: dict[int, Counter[str]]


def parse_raw(text: str) -> Samples:
    """Read ``py-spy record --threads --format raw`` output (``thread (TID): NAME;frames
    COUNT`` per line)."""
    names: dict[int, str] = {}
    areas: dict[int, Counter[str]] = defaultdict(Counter)
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        head, _, frames = stack.partition(";")
        found = THREAD_FRAME.match(head)
        if found is None or not count.isdigit():
            continue
        tid = int(found.group(1))
        names[tid] = found.group(2)
        areas[tid][area_of(frames)] += int(count)
    return Samples(names, dict(areas))


@dataclass(frozen=True)
class Profile:
    """CPU by area, in cores, over ``seconds``."""

    seconds: float
    cores: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.cores.values())

    def lines(self) -> list[str]:
        total = self.total or 1.0
        rows = sorted(self.cores.items(), key=lambda item: -item[1])
        out = [
            f"where the time goes ({self.total:.2f} cores over {self.seconds:g} s: exact CPU "
            "per thread from /proc, the event loop's and the pools' shared out by py-spy):"
        ]
        out += [f"  {cores:5.2f} cores {cores / total:6.1%}  {area}" for area, cores in rows]
        return out


def attribute(
    cpu_s: dict[int, float], samples: Samples, seconds: float, process_cores: float
) -> Profile:
    """Each thread's CPU seconds over the window (``cpu_s``) under its area (module doc).
    What ``process_cores`` holds beyond the live threads' sum was spent by threads that
    ended inside the window: each segment's encoder starts x264 workers of its own."""
    cores: defaultdict[str, float] = defaultdict(float)
    for tid, used in cpu_s.items():
        if used <= 0:
            continue
        name = samples.names.get(tid)
        if name is None:
            cores[NATIVE] += used / seconds
            continue
        area = named_area(name)
        seen = samples.areas.get(tid, Counter())
        if area is not None or not seen:
            cores[area or OTHER] += used / seconds
            continue
        counted = sum(seen.values())
        for where, count in seen.items():
            cores[where] += used / seconds * count / counted
    ended = process_cores - sum(cores.values())
    if ended > 0.005:
        cores[NATIVE] += ended
    return Profile(seconds, dict(cores))


def record(pid: int, seconds: float, out: Path, rate: int = 100) -> Samples:
    """Sample ``pid`` for ``seconds``. Raises ``RuntimeError`` if py-spy is missing or
    fails (it needs ptrace rights over the process)."""
    command = py_spy()
    if command is None:
        raise RuntimeError("py-spy is not installed (pip install -e '.[bench]')")
    arguments = ["record", "--pid", str(pid), "--duration", f"{seconds:.0f}", "--rate"]
    arguments += [str(rate), "--format", "raw", "--output", str(out), "--nonblocking"]
    done = subprocess.run(
        [command, *arguments, "--threads"],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=False,
    )
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"py-spy failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return parse_raw(out.read_text())
