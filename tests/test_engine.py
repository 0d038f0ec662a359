"""The runner against real backends: a SQLite queue and store in a temp dir."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from mediaflow import FlowBuilder, FlowSession, PortKindError
from mediaflow.config import EngineSettings
from mediaflow.engine.events import Event, EventBus
from mediaflow.queue.contract import StreamKey, WorkItem
from mediaflow.queue.sqlite import SqliteQueue
from tests.engine_nodes import (
    AwayThenBack,
    Counter,
    Doubler,
    Flaky,
    ImageSink,
    Recorder,
    WrongKind,
    rss_bytes,
)

FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)


def collect(bus: EventBus) -> list[Event]:
    return bus.recent(0)


async def run_until_idle(
    builder: FlowBuilder, data: Path, settings: EngineSettings = FAST, timeout: float = 60
) -> tuple[FlowSession, list[Event]]:
    bus = EventBus(history=100_000)
    session = FlowSession(builder.build(), data, settings=settings, bus=bus)
    await session.start()
    try:
        reason = await asyncio.wait_for(session.wait(until_idle=True), timeout)
    finally:
        await session.stop()
    assert reason == "idle"
    return session, collect(bus)


async def test_every_chunk_reaches_a_consumer_in_order(tmp_path: Path) -> None:
    flow = (
        FlowBuilder("basic")
        .add("src", Counter, count=500)
        .add("sink", Recorder, inputs={"chunk": "src.chunk"})
    )
    _, events = await run_until_idle(flow, tmp_path)
    assert Recorder.seen["sink"] == list(range(500))
    types = {e.type for e in events}
    assert {"run_started", "source_started", "source_ended", "run_finished"} <= types


async def test_fan_out_gives_each_reader_every_chunk(tmp_path: Path) -> None:
    flow = (
        FlowBuilder("fan")
        .add("src", Counter, count=300)
        .add("fast", Recorder, inputs={"chunk": "src.chunk"})
        .add("slow", Recorder, delay_s=0.001, inputs={"chunk": "src.chunk"})
    )
    await run_until_idle(flow, tmp_path)
    assert Recorder.seen["fast"] == list(range(300))
    assert Recorder.seen["slow"] == list(range(300))


async def test_returned_outputs_flow_downstream(tmp_path: Path) -> None:
    flow = (
        FlowBuilder("chain")
        .add("src", Counter, count=20)
        .add("double", Doubler, inputs={"chunk": "src.chunk"})
    )
    bus = EventBus()
    session = FlowSession(flow.build(), tmp_path, settings=FAST, bus=bus)
    await session.start()
    await session.wait(until_idle=True)
    assert session.snapshot().latest[("double", "n")] == 38
    await session.stop()


async def test_slow_consumer_gets_all_5000_chunks_with_the_backlog_on_disk(
    tmp_path: Path,
) -> None:
    """A consumer far slower than its source receives every chunk, in seq order;
    the backlog waits in the queue file and process memory stays flat."""
    chunk_bytes = 8192
    count = 5000
    settings = replace(FAST, degraded_samples=3, degraded_min_items=500)

    def slow_flow(chunks: int) -> FlowBuilder:
        return (
            FlowBuilder("slow")
            .add("src", Counter, count=chunks, pad=chunk_bytes)
            .add("sink", Recorder, delay_s=0.001, inputs={"chunk": "src.chunk"})
        )

    # A first run in this process costs about 10 MB whatever its length (the
    # threads' malloc arenas, SQLite's caches): a short run of the same flow
    # pays it before the baseline, so the bound below weighs only the backlog.
    warm_up = FlowSession(slow_flow(300).build(), tmp_path / "warm-up", settings=settings)
    await warm_up.start()
    await warm_up.wait(until_idle=True)
    await warm_up.stop()

    flow = slow_flow(count)
    bus = EventBus(history=100_000)
    session = FlowSession(flow.build(), tmp_path, settings=settings, bus=bus)
    baseline = rss_bytes()
    await session.start()
    peak_rss = baseline
    peak_disk_backlog = 0
    peak_held = 0
    waiter = asyncio.create_task(session.wait(until_idle=True))
    while not waiter.done():
        backlog = await session.queue.backlog_flows()
        peak_disk_backlog = max(peak_disk_backlog, backlog.get("slow", 0))
        peak_held = max(peak_held, session.snapshot().in_memory)
        peak_rss = max(peak_rss, rss_bytes())
        await asyncio.sleep(0.05)
    assert waiter.result() == "idle"
    await session.stop()

    assert Recorder.seen["sink"] == list(range(count))
    # The source ran far ahead: most of the chunks waited on disk at once ...
    assert peak_disk_backlog > count * 0.6
    # ... while memory held at most one bounded line per node, not the backlog
    # (count * chunk_bytes = 40 MB would show up in RSS if it were buffered).
    assert peak_held <= settings.node_buffer + 1
    assert peak_rss - baseline < 0.25 * count * chunk_bytes
    degraded = [e for e in bus.recent(0) if e.type == "engine_degraded"]
    assert degraded and degraded[0].data["flow"] == "slow"


async def test_a_failing_node_is_retried_in_order_then_dead_lettered(tmp_path: Path) -> None:
    flow = (
        FlowBuilder("flaky")
        .add("src", Counter, count=6)
        .add("f", Flaky, bad=[2, 4], failures=10, inputs={"chunk": "src.chunk"})
    )
    session, events = await run_until_idle(flow, tmp_path)
    # seq 2 is tried max_attempts times before seq 3 runs: order per edge holds.
    order = [seq for seq, _ in Flaky.runs]
    assert order == [0, 1, 2, 2, 2, 3, 4, 4, 4, 5]
    dropped = [e for e in events if e.type == "cascade_dropped"]
    assert [e.data["seq"] for e in dropped] and len(dropped) == 2
    assert all("flaky on seq" in e.data["reason"] for e in dropped)
    retries = [e for e in events if e.type == "cascade_retry"]
    assert len(retries) == 4
    assert session.queue is not None


async def test_a_node_that_recovers_is_not_dead_lettered(tmp_path: Path) -> None:
    flow = (
        FlowBuilder("recover")
        .add("src", Counter, count=3)
        .add("f", Flaky, bad=[1], failures=1, inputs={"chunk": "src.chunk"})
    )
    _, events = await run_until_idle(flow, tmp_path)
    assert [seq for seq, _ in Flaky.runs] == [0, 1, 1, 2]
    assert not [e for e in events if e.type == "cascade_dropped"]


async def test_a_wait_for_a_service_that_is_away_is_logged_once_and_its_end_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flow = (
        FlowBuilder("waits")
        .add("src", Counter, count=3)
        .add("hook", AwayThenBack, away=3, inputs={"chunk": "src.chunk"})
    )
    with caplog.at_level(logging.DEBUG, logger="mediaflow.engine"):
        _, events = await run_until_idle(flow, tmp_path)
    assert AwayThenBack.ran == [0, 1, 2]
    retries = [e for e in events if e.type == "cascade_retry"]
    assert [e.data["away"] for e in retries] == ["hook"] * 3
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "'hook'" in r.getMessage()]
    assert [level for level, _ in said] == [
        logging.WARNING, logging.DEBUG, logging.DEBUG, logging.INFO
    ]  # fmt: skip
    assert "the hook is away" in said[0][1] and "try 1 of this wait" in said[0][1]
    assert "runs again: the hook answered" in said[-1][1] and "3 tries" in said[-1][1]


async def test_wrong_kind_is_refused_at_the_producer(tmp_path: Path) -> None:
    flow = (
        FlowBuilder("kinds")
        .add("bad", WrongKind)
        .add("sink", ImageSink, inputs={"image": "bad.image"})
    )
    _, events = await run_until_idle(flow, tmp_path)
    (dropped,) = [e for e in events if e.type == "cascade_dropped"]
    reason = dropped.data["reason"]
    assert reason.startswith(PortKindError.__name__)
    assert "'bad'" in reason and "'image'" in reason and "int" in reason


async def test_pause_holds_work_on_disk_and_step_runs_one(tmp_path: Path) -> None:
    flow = (
        FlowBuilder("pausable")
        .add("src", Counter, count=10)
        .add("sink", Recorder, inputs={"chunk": "src.chunk"})
    )
    session = FlowSession(flow.build(), tmp_path, settings=FAST)
    await session.start()
    await session.pause()
    for _ in range(100):
        if (await session.queue.backlog_flows()).get("pausable", 0) >= 10:
            break
        await asyncio.sleep(0.02)
    assert Recorder.seen["sink"] == []
    await session.step()
    for _ in range(100):
        if Recorder.seen["sink"]:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)
    assert Recorder.seen["sink"] == [0]
    await session.resume()
    assert await asyncio.wait_for(session.wait(until_idle=True), 20) == "idle"
    await session.stop()
    assert Recorder.seen["sink"] == list(range(10))


async def test_backlog_left_by_a_stopped_run_is_delivered_by_the_next(tmp_path: Path) -> None:
    def flow(count: int) -> FlowBuilder:
        return (
            FlowBuilder("carry")
            .add("src", Counter, count=count)
            .add("sink", Recorder, delay_s=0.002, inputs={"chunk": "src.chunk"})
        )

    session = FlowSession(flow(400).build(), tmp_path, settings=FAST)
    await session.start()
    await asyncio.sleep(0.3)
    await session.stop()
    first = list(Recorder.seen["sink"])
    assert 0 < len(first) < 400
    _, _ = await run_until_idle(flow(0), tmp_path)
    assert first + Recorder.seen["sink"] == list(range(400))


async def test_second_session_on_a_live_run_is_refused(tmp_path: Path) -> None:
    from mediaflow.engine.session import FlowAlreadyRunning

    flow = FlowBuilder("solo").add("src", Counter, count=100_000, period_s=0.01)
    first = FlowSession(flow.build(), tmp_path, settings=FAST)
    await first.start()
    try:
        with pytest.raises(FlowAlreadyRunning, match="already running"):
            await FlowSession(flow.build(), tmp_path, settings=FAST).start()
    finally:
        await first.stop()


class AnswerHeldBack(SqliteQueue):
    """Once armed, holds back the answer of the next claim that took items: the
    queue has handed them over, the runner has not seen them yet."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.armed = False
        self.holding = asyncio.Event()
        self.answer = asyncio.Event()

    async def claim(self, consumer: str, wants: Mapping[StreamKey, int]) -> list[WorkItem]:
        items = await super().claim(consumer, wants)
        if items and self.armed:
            self.armed = False
            self.holding.set()
            await self.answer.wait()
        return items


async def test_a_stop_hands_back_unstarted_what_a_claim_on_its_way_took(tmp_path: Path) -> None:
    """A stop waits for a claim already sent and gives its items back as never
    delivered: the next run (or the worker taking the stream over) runs them as
    first deliveries, not as redeliveries."""
    log = tmp_path / "sink.log"

    def flow(count: int) -> FlowBuilder:
        return (
            FlowBuilder("handback")
            .add("src", Counter, count=count)
            .add("sink", Recorder, delay_s=0.002, log_file=str(log), inputs={"chunk": "src.chunk"})
        )

    queue = AnswerHeldBack(tmp_path / "queue.sqlite3")
    session = FlowSession(flow(400).build(), tmp_path, settings=FAST, queue=queue)
    await session.start()
    queue.armed = True
    await asyncio.wait_for(queue.holding.wait(), 30)
    stopping = asyncio.create_task(session.stop())
    done, _ = await asyncio.wait({stopping}, timeout=0.5)
    assert not done, "the stop waits for the claim on its way"
    queue.answer.set()
    await stopping
    first = list(Recorder.seen["sink"])
    await run_until_idle(flow(0), tmp_path)
    assert first + Recorder.seen["sink"] == list(range(400))
    deliveries = [line.split()[1] for line in log.read_text().splitlines()]
    assert len(deliveries) == 400 and set(deliveries) == {"1"}
