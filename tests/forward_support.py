"""What the forwarding tests share: a flow of an edge box (a source of audio chunks,
a node on the shared side, one on the box itself), plain values in a box's journal
and a forwarder of them, and reading what reached the shared queue.

No tests live here; ``tests/test_forward*.py`` import what they use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from mediaflow import Context, FlowBuilder, Node
from mediaflow.engine.events import EventBus
from mediaflow.forward import Forwarder
from mediaflow.queue import open_queue
from mediaflow.queue.contract import NewItem, StreamKey, WorkItem
from mediaflow.queue.sqlite import SqliteQueue
from mediaflow.store import ArtifactStore
from mediaflow.store.service import ServiceClient
from tests.redis_server import RedisServer

CHUNKS = 60


class Chunks(Node):
    """A source of ``CHUNKS`` audio artifacts of about ``size`` bytes, one every 30 ms,
    each naming its seq."""

    outputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}
    resume: ClassVar[asyncio.Event | None] = None
    """Set by a test: the source waits for it halfway, so that the second half
    lands while the test holds the link down."""

    def __init__(self, size: int = 400) -> None:
        self.size = size

    async def run(self, ctx: Context) -> None:
        for seq in range(CHUNKS):
            if seq == CHUNKS // 2 and Chunks.resume is not None:
                await Chunks.resume.wait()
            line = f"chunk {seq} ".encode()
            payload = line * (self.size // len(line))
            ref = await ctx.save_artifact(payload, "audio/x-test", {"seq": seq})
            await ctx.emit("audio", ref)
            await asyncio.sleep(0.03)


class Heard(Node):
    """Where the chunks are consumed: on the shared side (it never runs here)."""

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    async def run(self, ctx: Context) -> None:
        return None


class Local(Node):
    """A consumer on the box itself (``edge = true``): it runs on the local journal."""

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}
    seen: ClassVar[list[int]] = []

    async def run(self, ctx: Context) -> None:
        Local.seen.append(ctx.inputs["audio"].meta["seq"])


def edge_flow(size: int = 400) -> Any:
    return (
        FlowBuilder("edge")
        .add("mic", Chunks, size=size)
        .add("heard", Heard, inputs={"audio": "mic.audio"})
        .add("local", Local, inputs={"audio": "mic.audio"}, edge=True)
        .build()
    )


async def shared_items(redis: RedisServer, stream: StreamKey) -> list[WorkItem]:
    queue = open_queue(redis.url, Path("/nonexistent"))
    try:
        return await queue.claim("check", {stream: 10 * CHUNKS})
    finally:
        await queue.close()


async def next_event(events: Any, kind: str, timeout_s: float = 30.0) -> Any:
    """The next event of type ``kind`` from the subscription ``events`` (others are
    passed over); fails the test after ``timeout_s`` without one."""
    while True:
        event = await events.get(timeout=timeout_s)
        if event is None:
            pytest.fail(f"no {kind} event in {timeout_s} s")
        if event.type == kind:
            return event


LEVELS = StreamKey("edge", "heard")  # the stream the levels' tests forward


async def journal_levels(local: SqliteQueue, stream: StreamKey, count: int) -> None:
    """``count`` plain values (no artifacts) waiting in the box's journal for ``stream``."""
    payloads = [{"src": "mic.level", "port": "level", "value": n, "at": 1.0} for n in range(count)]
    await local.commit([NewItem(stream, "emission", p, claim=False) for p in payloads])


@asynccontextmanager
async def levels_box(
    local: SqliteQueue, redis: RedisServer, tmp_path: Path, bus: EventBus | None = None
) -> AsyncIterator[Forwarder]:
    """A forwarder of :data:`LEVELS` from ``local`` to ``redis``; both queues closed after."""
    shared = open_queue(redis.url, tmp_path)
    try:
        yield levels_forwarder(LEVELS, local, shared, tmp_path, bus)
    finally:
        await shared.close()
        await local.close()


def levels_forwarder(
    stream: StreamKey, local: SqliteQueue, shared: Any, tmp_path: Path, bus: EventBus | None = None
) -> Forwarder:
    """A forwarder of ``stream`` for box "box", with no artifacts to upload."""
    return Forwarder(
        "edge",
        lambda: [stream],
        edge="box",
        local=local,
        store=ArtifactStore(tmp_path / "store"),
        shared=shared,
        uploads=ServiceClient("http://127.0.0.1:9"),  # no artifacts here: never asked
        bus=bus or EventBus(),
    )
