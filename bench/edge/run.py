"""One run of the bench: the edge box through an outage, and the same flow without
forwarding for the CPU it is measured against.

**Forwarding** (:func:`forward_run`): ``redis-server``, ``mediaflow serve`` and
``mediaflow run FLOW --until-idle`` with ``MEDIAFLOW_FORWARD_QUEUE`` /
``MEDIAFLOW_FORWARD_STORE``, each a process of its own on loopback. After
``warmup_s``, a live window of ``live_s`` (the capture rate, the CPU, the live
latency); then the service and Redis are both stopped for ``outage_s`` and
started again on their ports, and the box catches up while it goes on capturing.
The sources end ``post_s`` after the outage; the box drains and exits, and the
shared queue's streams are counted against what the sources emitted (the run's
``--jsonl``). A :class:`~bench.edge.watch.Watcher` looks every ``every_s`` all along.

**Without forwarding** (:func:`plain_run`): the same flow file run plainly
(``mediaflow run``, its consumers running locally and doing nothing), its CPU over
a window as long as the live one after the same warm-up.

**Without an outage** (:func:`steady_run`): the forwarding box again, watched the
same way, with the link up all along; its RSS over the window the outage takes in
the forwarding run (from the live window's end, ``outage_s`` long): what the box
grows by anyway at that age, against which the outage's growth is read.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.edge.flow import CONSUMERS, FLOW, EdgeFlow, write_flow
from bench.edge.procs import TOKEN, FlowRun, Redis, Service
from bench.edge.watch import Look, Watcher, machine_busy_s
from mediaflow.queue import StreamKey, open_queue

Say = Callable[[str], None]
DRAIN_S = 120.0  # after the sources end, at most, for the box to forward the rest
LINK_DOWN = "forward: the link is down"
LINK_BACK = "forward: the link is back"


@dataclass(frozen=True)
class RunConfig:
    outage_s: float = 600.0
    warmup_s: float = 5.0
    live_s: float = 30.0
    post_s: float | None = None
    """Capture after the outage; None: a quarter of the outage + 10 s (the time a
    catch-up at 5x the live rate takes, with room)."""
    every_s: float = 0.1

    @property
    def after_s(self) -> float:
        return self.post_s if self.post_s is not None else max(15.0, self.outage_s / 4 + 10.0)

    @property
    def capture_s(self) -> float:
        return self.warmup_s + self.live_s + self.outage_s + self.after_s


@dataclass(frozen=True)
class Window:
    """CPU over a stretch of time: the box's own and the machine's (every core)."""

    seconds: float
    cpu_s: float
    machine_s: float

    @property
    def cores(self) -> float:
        """The box's CPU as a share of one core."""
        return self.cpu_s / self.seconds

    @property
    def machine_cores(self) -> float:
        return self.machine_s / self.seconds


@dataclass
class ForwardRun:
    looks: list[Look]
    marks: dict[str, float]  # monotonic times of the phases (see forward_run)
    live: Window
    exit_status: int | None
    emitted: dict[str, list[int]]  # consumer -> the seqs its source emitted, in order
    arrived: dict[str, int]  # consumer -> items of its stream in the shared queue
    log_lines: dict[str, int]  # the box's link-down and link-back lines
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "marks": self.marks,
            "live": self.live.__dict__,
            "exit_status": self.exit_status,
            "emitted": {k: len(v) for k, v in self.emitted.items()},
            "arrived": self.arrived,
            "log_lines": self.log_lines,
            "errors": self.errors,
            "looks": [look.to_json() for look in self.looks],
        }


def _now() -> float:
    return time.monotonic()


async def _window(watcher: Watcher, seconds: float) -> Window:
    cpu, machine, started = watcher.cpu_s(), machine_busy_s(), _now()
    await asyncio.sleep(seconds)
    took = _now() - started
    return Window(took, watcher.cpu_s() - cpu, machine_busy_s() - machine)


async def forward_run(flow: EdgeFlow, config: RunConfig, place: Path, say: Say) -> ForwardRun:
    """The edge box through one outage (module doc). Raises ``RuntimeError`` if a
    process does not start."""
    redis, service = Redis(place / "redis"), Service(place / "service")
    await asyncio.to_thread(redis.start)
    await asyncio.to_thread(service.start)
    flow_file = write_flow(place / "flow", flow, config.capture_s)
    marks: dict[str, float] = {"start": _now()}
    box: FlowRun | None = None
    watcher: Watcher | None = None
    try:
        box = await asyncio.to_thread(
            FlowRun,
            flow_file,
            place / "box",
            ["--until-idle"],
            MEDIAFLOW_TOKEN=TOKEN,
            MEDIAFLOW_FORWARD_QUEUE=redis.url,
            MEDIAFLOW_FORWARD_STORE=service.url,
        )
        watcher = Watcher(box.url, box.pid, redis.url, config.every_s)
        watcher.start()
        await asyncio.sleep(config.warmup_s)
        marks["live"] = _now()
        live = await _window(watcher, config.live_s)
        marks["live_end"] = _now()
        say(f"   live {live.seconds:.0f} s; link down for {config.outage_s:g} s")
        await asyncio.gather(asyncio.to_thread(service.stop), asyncio.to_thread(redis.stop))
        marks["down"] = _now()
        await asyncio.sleep(config.outage_s)
        marks["down_end"] = _now()
        await asyncio.gather(asyncio.to_thread(redis.start), asyncio.to_thread(service.start))
        marks["up"] = _now()
        say("   link back; catching up")
        left = config.capture_s - (_now() - marks["start"]) + DRAIN_S
        status = await asyncio.to_thread(box.wait, max(left, 1.0))
        marks["exited"] = _now()
        looks, watcher = await watcher.stop(), None
        errors = [] if status is not None else [f"the box still ran {DRAIN_S:g} s after capture"]
        arrived = await _arrived(redis.url)
    finally:
        if watcher is not None:
            await watcher.stop()
        if box is not None:
            box.stop()
        service.stop()
        redis.stop()
    text = box.log_text()
    return ForwardRun(
        looks=looks,
        marks=marks,
        live=live,
        exit_status=status,
        emitted=_emitted(box.out),
        arrived=arrived,
        log_lines={"link_down": text.count(LINK_DOWN), "link_back": text.count(LINK_BACK)},
        errors=errors,
    )


@dataclass
class SteadyRun:
    """The forwarding box with the link up all along: its looks, and the marks of
    the forwarding run's phases at the same ages (``live_end``, ``down_end``)."""

    looks: list[Look]
    marks: dict[str, float]


async def steady_run(flow: EdgeFlow, config: RunConfig, place: Path) -> SteadyRun:
    """The forwarding box without an outage (module doc), stopped at the age the
    forwarding run's outage ends."""
    redis, service = Redis(place / "steady-redis"), Service(place / "steady-service")
    await asyncio.to_thread(redis.start)
    await asyncio.to_thread(service.start)
    flow_file = write_flow(place / "steady-flow", flow, config.capture_s)
    marks: dict[str, float] = {"start": _now()}
    box: FlowRun | None = None
    watcher: Watcher | None = None
    try:
        box = await asyncio.to_thread(
            FlowRun,
            flow_file,
            place / "steady",
            ["--until-idle"],
            MEDIAFLOW_TOKEN=TOKEN,
            MEDIAFLOW_FORWARD_QUEUE=redis.url,
            MEDIAFLOW_FORWARD_STORE=service.url,
        )
        watcher = Watcher(box.url, box.pid, redis.url, config.every_s)
        watcher.start()
        await asyncio.sleep(config.warmup_s + config.live_s)
        marks["live_end"] = _now()
        await asyncio.sleep(config.outage_s)
        marks["down_end"] = _now()
        looks, watcher = await watcher.stop(), None
    finally:
        if watcher is not None:
            await watcher.stop()
        if box is not None:
            box.stop()
        service.stop()
        redis.stop()
    return SteadyRun(looks, marks)


async def plain_run(flow: EdgeFlow, config: RunConfig, place: Path) -> Window:
    """The box's CPU without forwarding: the same flow run plainly (module doc)."""
    seconds = config.warmup_s + config.live_s + 30.0
    flow_file = write_flow(place / "flow", flow, seconds)
    run = await asyncio.to_thread(FlowRun, flow_file, place / "plain", ["--for", f"{seconds:.0f}"])
    try:
        watcher = Watcher(run.url, run.pid, None, config.every_s)
        await asyncio.sleep(config.warmup_s)
        return await _window(watcher, config.live_s)
    finally:
        run.stop()


async def _arrived(url: str) -> dict[str, int]:
    """Items of each forwarded stream in the shared queue (nobody consumes them)."""
    queue = open_queue(url, Path("/nonexistent"))
    try:
        backlog = await queue.backlog()
    finally:
        await queue.close()
    return {
        consumer: backlog[key].total if (key := StreamKey(FLOW, consumer)) in backlog else 0
        for consumer in CONSUMERS
    }


def _emitted(jsonl: Path) -> dict[str, list[int]]:
    """Per consumer, the seqs its source emitted (the box's ``--jsonl``), in order."""
    by_port = {source: consumer for consumer, source in CONSUMERS.items()}
    emitted: dict[str, list[int]] = {consumer: [] for consumer in CONSUMERS}
    for line in jsonl.read_text().splitlines():
        row = json.loads(line)
        consumer = by_port.get((row.get("node"), row.get("port")))
        if consumer is not None:
            emitted[consumer].append(int(row["value"]["meta"]["seq"]))
    return emitted
