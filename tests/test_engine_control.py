"""Operating a running flow through its session, on both queue backends: pause,
step (exactly one item, the oldest, answered), disable and enable (sources end
and resume where they were; work is kept, not run)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mediaflow import FlowBuilder, FlowSession
from mediaflow.config import EngineSettings
from mediaflow.engine.events import EventBus
from mediaflow.engine.session import FlowStateError
from tests.engine_nodes import Counter, Recorder, source_ended
from tests.redis_server import RedisServer

FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)


@pytest.fixture(params=["sqlite", "redis"])
def queue_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    server: RedisServer = request.getfixturevalue("redis_server")
    return f"{server.url}?prefix=control-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def paced(tmp_path: Path, queue_url: str | None) -> AsyncIterator[FlowSession]:
    """A source emitting 400 chunks, one every 5 ms, to a recorder."""
    flow = (
        FlowBuilder("ops")
        .add("src", Counter, count=400, period_s=0.005)
        .add("sink", Recorder, inputs={"chunk": "src.chunk"})
    )
    bus = EventBus(history=10_000)
    session = FlowSession(flow.build(), tmp_path, queue_url=queue_url, settings=FAST, bus=bus)
    await session.start()
    try:
        yield session
    finally:
        await session.stop()


async def eventually(check: object, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        if callable(check) and await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


async def test_step_runs_exactly_the_oldest_waiting_item_and_says_which(
    paced: FlowSession,
) -> None:
    session = paced
    with pytest.raises(FlowStateError, match="not paused"):
        await session.step()
    await session.pause()

    async def backlog_of_ten() -> bool:
        return (await session.queue.backlog_flows()).get("ops", 0) >= 10

    await eventually(backlog_of_ten)
    ran = len(Recorder.seen["sink"])
    await asyncio.sleep(0.1)
    assert len(Recorder.seen["sink"]) == ran  # paused: nothing more runs
    stepped = await session.step()
    assert stepped is not None
    assert (stepped["node"], stepped["seq"]) == ("sink", ran + 1)
    await eventually(lambda: _true(len(Recorder.seen["sink"]) == ran + 1))
    await asyncio.sleep(0.1)
    assert Recorder.seen["sink"] == list(range(ran + 1))  # exactly one more, the oldest
    assert session.snapshot().status == "paused"
    await session.resume()
    assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
    assert Recorder.seen["sink"] == list(range(400))


async def test_disable_ends_sources_keeps_work_and_enable_resumes_them(
    paced: FlowSession,
) -> None:
    session = paced
    await eventually(lambda: _true(len(Recorder.seen["sink"]) >= 20))
    await session.disable()
    assert session.snapshot().status == "disabled"
    with pytest.raises(FlowStateError, match="disabled"):
        await session.step()
    # The source notices ctx.stopping(), hands its item back and ends.
    await eventually(lambda: _true(source_ended(session.bus, "src")))
    emitted = dict(session.snapshot().latest)[("src", "chunk")]["seq"]
    ran = len(Recorder.seen["sink"])
    await asyncio.sleep(0.3)
    snapshot = session.snapshot()
    assert dict(snapshot.latest)[("src", "chunk")]["seq"] == emitted  # the source ended
    assert len(Recorder.seen["sink"]) == ran  # nothing runs
    assert emitted < 399
    await session.enable()
    assert session.snapshot().status == "running"
    assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
    # The source resumed after its last chunk: every seq once, in order.
    assert Recorder.seen["sink"] == list(range(400))
    types = [e.type for e in session.bus.recent(0)]
    assert types.count("source_started") == 2
    assert "flow_disabled" in types and "flow_enabled" in types


async def _true(value: bool) -> bool:
    return value
