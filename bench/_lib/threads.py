"""The CPU time of each thread of a process, read from outside (``/proc/PID/task``),
and py-spy, which names what Python threads run: how the scale and IP camera
benches share a process's CPU out by job.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of ``pid`` now; threads that end
    while they are read are left out."""
    times: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                after = fh.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        times[int(tid)] = (int(after[11]) + int(after[12])) / CLOCK_TICKS
    return times


def window_cpu(start: dict[int, float], end: dict[int, float]) -> dict[int, float]:
    """Each thread's CPU over a window (a thread born inside it started at 0)."""
    return {tid: used - start.get(tid, 0.0) for tid, used in end.items()}


def py_spy() -> str | None:
    """The py-spy command (the bench extra installs it next to this Python), or None."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")
