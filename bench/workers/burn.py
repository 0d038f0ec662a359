"""The nodes of :mod:`bench.workers` (flow files name them ``bench.workers.burn:...``) and
the calibration of the burn loop (:mod:`bench.workers.burn_loop`) they share with the
bare-Python ceiling.

Kept small on purpose: every executor process imports it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from bench.workers.burn_loop import burn
from mediaflow import Context, Node

GATE_POLL_S = 0.002


def calibrate(target_s: float, probe: int = 200_000) -> tuple[int, float]:
    """Iterations of :func:`burn` that take about ``target_s`` here, and the
    seconds per iteration measured (the fastest of five probes)."""
    per_iteration = min(_timed(probe) for _ in range(5)) / probe
    return max(1, round(target_s / per_iteration)), per_iteration


def _timed(iterations: int) -> float:
    started = time.perf_counter()
    burn(iterations, 1)
    return time.perf_counter() - started


class Emitter(Node):
    """Emits ``{"seq": n}`` for n in range(count) as fast as ``emit`` returns, then
    writes ``count`` to ``done_file``."""

    outputs: ClassVar[Mapping[str, str]] = {"item": "json"}

    def __init__(self, count: int, done_file: str) -> None:
        self.count = count
        self.done_file = done_file

    async def run(self, ctx: Context) -> None:
        for seq in range(self.count):
            await ctx.emit("item", {"seq": seq})
        Path(self.done_file).write_text(str(self.count))


class Burner(Node):
    """Burns ``iterations`` of :func:`burn` per item and appends ``pid seq start end``
    (``time.monotonic()``: CLOCK_MONOTONIC, one clock for every process of the
    machine) to ``log_file``, one ``write`` per line so executors never mix lines.

    The first item a process gets waits, without burning, until ``go_file``
    exists, after writing its pid to ``ready_file``: the bench starts every
    executor's work at the same moment, from a backlog already in the queue.
    Items are independent, so every executor claims the stream at once.
    """

    inputs: ClassVar[Mapping[str, str]] = {"item": "json"}
    ordered: ClassVar[bool] = False

    def __init__(self, iterations: int, log_file: str, ready_file: str, go_file: str) -> None:
        self.iterations = iterations
        self.log_file = log_file
        self.ready_file = ready_file
        self.go_file = go_file
        self._fd = -1
        self._gated = True

    async def setup(self, ctx: Context) -> None:
        self._fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def run(self, ctx: Context) -> None:
        if self._gated:
            self._gated = False
            with open(self.ready_file, "a") as fh:
                fh.write(f"{os.getpid()}\n")
            while not os.path.exists(self.go_file):
                await asyncio.sleep(GATE_POLL_S)
        seq = ctx.inputs["item"]["seq"]
        started = time.monotonic()
        burn(self.iterations, seq)
        line = f"{os.getpid()} {seq} {started!r} {time.monotonic()!r}\n"
        os.write(self._fd, line.encode())

    async def teardown(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
