"""The nodes and flows :mod:`bench.emissions` measures, and the probes they fill.

Each measurement is a two-stage flow (:func:`two_stage`: a source node, one
consumer node) built from node *instances*, each holding the probe the
measurement reads; FlowBuilder accepts an instance in place of a class. A probe
is written only from the child's event loop. Apart from the measurements
(:mod:`bench.emissions.child`): this is what runs inside mediaflow, that is
what starts, times and sums it up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from bench._lib.common import Json, rss_bytes
from mediaflow import Context, FlowBuilder, FlowSession, Node

FLOW = "emissions"


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


def two_stage(source: Node, sink: Node) -> FlowBuilder:
    return (
        FlowBuilder(FLOW).add("source", source).add("sink", sink, inputs={"value": "source.value"})
    )
