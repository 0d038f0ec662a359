"""Small real nodes the engine tests run (also from subprocess flows)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from mediaflow import Context, Node
from mediaflow.engine.events import EventBus
from mediaflow.node import DependencyAway


class Counter(Node):
    """Emits ``count`` JSON chunks ``{"seq": n, "pad": ...}`` as fast as the queue takes them.

    With ``done_file`` it writes the number emitted there when it finishes, so a
    test can tell the source ended.
    """

    outputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}

    def __init__(
        self, count: int = 100, pad: int = 0, period_s: float = 0.0, done_file: str = ""
    ) -> None:
        self.count = count
        self.pad = "x" * pad
        self.period_s = period_s
        self.done_file = done_file

    async def run(self, ctx: Context) -> None:
        start = 0
        if ctx.redelivery:  # resumed after a crash: carry on after the last chunk
            last = ctx.more.latest("chunk")
            start = last["seq"] + 1 if last else 0
        for seq in range(start, self.count):
            if ctx.stopping():
                return
            await ctx.emit("chunk", {"seq": seq, "pad": self.pad})
            if self.period_s:
                await asyncio.sleep(self.period_s)
        if self.done_file:
            Path(self.done_file).write_text(str(self.count))


class Recorder(Node):
    """Records each chunk's seq; sleeps ``delay_s`` per chunk to play a slow consumer.

    ``log_file`` gets one line per delivery, ``seq deliveries redelivery``,
    written before the item is acked (so a kill after the write shows up as a
    redelivery on restart).
    """

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}
    seen: ClassVar[dict[str, list[int]]] = {}

    def __init__(self, delay_s: float = 0.0, log_file: str = "", name: str = "") -> None:
        self.delay_s = delay_s
        self.log_file = log_file
        self.name = name
        self._fh: Any = None

    async def setup(self, ctx: Context) -> None:
        Recorder.seen[self.name or ctx.node] = []
        if self.log_file:
            self._fh = open(self.log_file, "a", buffering=1)  # noqa: SIM115 - closed in teardown

    async def run(self, ctx: Context) -> None:
        seq = ctx.inputs["chunk"]["seq"]
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        Recorder.seen[self.name or ctx.node].append(seq)
        if self._fh is not None:
            assert ctx.item is not None
            self._fh.write(f"{seq} {ctx.item.deliveries} {int(ctx.redelivery)}\n")

    async def teardown(self) -> None:
        if self._fh is not None:
            self._fh.close()


class Doubler(Node):
    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}
    outputs: ClassVar[Mapping[str, str]] = {"n": "number"}

    async def run(self, ctx: Context) -> Mapping[str, Any]:
        return {"n": ctx.inputs["chunk"]["seq"] * 2}


class Flaky(Node):
    """Fails the first ``failures`` runs of each seq listed in ``bad``; records runs."""

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}
    runs: ClassVar[list[tuple[int, int]]] = []

    def __init__(self, bad: list[int] | None = None, failures: int = 1) -> None:
        self.bad = set(bad or [])
        self.failures = failures
        self._failed: dict[int, int] = {}
        Flaky.runs = []

    async def run(self, ctx: Context) -> None:
        seq = ctx.inputs["chunk"]["seq"]
        Flaky.runs.append((seq, self._failed.get(seq, 0)))
        if seq in self.bad and self._failed.get(seq, 0) < self.failures:
            self._failed[seq] = self._failed.get(seq, 0) + 1
            raise RuntimeError(f"flaky on seq {seq}")


class AwayThenBack(Node):
    """A sink whose service is away for its first ``away`` runs (whatever the item):
    each raises :class:`~mediaflow.node.DependencyAway` naming ``"hook"``."""

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}
    ran: ClassVar[list[int]] = []  # the seqs it ran, once back

    def __init__(self, away: int = 3) -> None:
        self.away = away
        AwayThenBack.ran = []

    async def run(self, ctx: Context) -> None:
        if self.away > 0:
            self.away -= 1
            raise DependencyAway("hook", "the hook service at http://127.0.0.1:9 is away")
        self.ran.append(ctx.inputs["chunk"]["seq"])


class Crasher(Node):
    """Kills its whole process (as a segfaulting codec would) on seq ``crash_on``."""

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}

    def __init__(self, crash_on: int = 3, log_file: str = "") -> None:
        self.crash_on = crash_on
        self.log_file = log_file

    async def run(self, ctx: Context) -> None:
        seq = ctx.inputs["chunk"]["seq"]
        assert ctx.item is not None
        with open(self.log_file, "a") as fh:
            fh.write(f"{seq} {ctx.item.deliveries} {int(ctx.redelivery)}\n")
        if seq == self.crash_on:
            os._exit(9)


class WrongKind(Node):
    """Emits a number on an image port: must be refused at the producer."""

    outputs: ClassVar[Mapping[str, str]] = {"image": "image"}

    async def run(self, ctx: Context) -> None:
        await ctx.emit("image", 42)


class ImageSink(Node):
    inputs: ClassVar[Mapping[str, str]] = {"image": "image"}

    async def run(self, ctx: Context) -> None:
        return None


def rss_bytes() -> int:
    """Resident set size of this process (Linux)."""
    with open(f"/proc/{os.getpid()}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def read_deliveries(path: Path) -> list[tuple[int, int, bool]]:
    rows = []
    for line in path.read_text().splitlines():
        seq, deliveries, redelivery = line.split()
        rows.append((int(seq), int(deliveries), redelivery == "1"))
    return rows


def dump(obj: object) -> str:
    return json.dumps(obj)


class ProcessLog(Node):
    """Logs each chunk as ``pid node seq deliveries`` to ``log_file`` (appended by
    every executor of the flow: lines of one write each, so they never mix) and
    sleeps ``delay_s``: an ordered consumer whose work tells which process ran it."""

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}

    def __init__(self, log_file: str, delay_s: float = 0.0) -> None:
        self.log_file = log_file
        self.delay_s = delay_s
        self._fd = -1

    async def setup(self, ctx: Context) -> None:
        self._fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def run(self, ctx: Context) -> None:
        assert ctx.item is not None
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        seq = ctx.inputs["chunk"]["seq"]
        os.write(self._fd, f"{os.getpid()} {ctx.node} {seq} {ctx.item.deliveries}\n".encode())

    async def teardown(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)


class UnorderedProcessLog(ProcessLog):
    """:class:`ProcessLog` for a node whose items are independent: every executor
    claims its stream at once (no lease)."""

    ordered: ClassVar[bool] = False


class TickLog(Node):
    """Records each timer firing it runs as ``(n, every_s)`` and sleeps ``delay_s``:
    a reader slower than the timer, so firings queue up."""

    inputs: ClassVar[Mapping[str, str]] = {"tick": "json"}
    seen: ClassVar[list[tuple[int, float]]] = []

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    async def setup(self, ctx: Context) -> None:
        TickLog.seen = []

    async def run(self, ctx: Context) -> None:
        tick = ctx.inputs["tick"]
        TickLog.seen.append((tick["n"], tick["every_s"]))
        await asyncio.sleep(self.delay_s)


def source_ended(bus: EventBus, node: str) -> bool:
    """Whether ``bus`` has told of source ``node`` ending (kept in its history)."""
    return any(e.type == "source_ended" and e.data["node"] == node for e in bus.recent(0))
