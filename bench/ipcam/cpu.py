"""CPU over a window for several process trees at once, and the machine's for context.

:func:`measure` reads ``/proc`` at the start and the end of a window: for each named
process, its CPU seconds and its live children's (``bench._lib.sample.tree_cpu``: user
+ system), per wall second, in cores; and ``machine``: every process on the machine
(``/proc/stat``), so that a window disturbed by other work (a test suite on the same
2 cores) shows it. A name may stand for a group of processes (one ffmpeg per camera):
their trees are summed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench._lib.sample import machine_busy, tree_cpu

MACHINE = "machine"


@dataclass(frozen=True)
class Window:
    """CPU over one window: ``cores`` by name (``machine``: everything running)."""

    seconds: float
    cores: dict[str, float]

    def of(self, name: str) -> float | None:
        return self.cores.get(name)


def _cpu(groups: Mapping[str, Sequence[int]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, pids in groups.items():
        total = 0.0
        for pid in pids:
            try:
                total += tree_cpu(pid)
            except FileNotFoundError:
                continue  # ended: its CPU is lost to the window, and the window says so
        out[name] = total
    return out


def measure(groups: Mapping[str, Sequence[int]], seconds: float) -> Window:
    """Each group's CPU (the trees of its pids) over the next ``seconds``; blocks that
    long. A process that ends inside the window counts only until its last look."""
    start, busy, before = time.monotonic(), machine_busy(), _cpu(groups)
    time.sleep(seconds)
    after, now_busy = _cpu(groups), machine_busy()
    span = time.monotonic() - start
    cores = {name: (after[name] - before[name]) / span for name in groups}
    cores[MACHINE] = (now_busy[0] - busy[0]) / span
    return Window(span, cores)
