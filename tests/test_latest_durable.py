"""Live views hear each value once, and only once it is durable: a ``latest`` event
(what ``/api/events`` sends the wall) leaves after the group commit carrying its
value lands, never before, and never twice."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from mediaflow import FlowBuilder, FlowSession
from mediaflow.engine.events import Event, EventBus
from mediaflow.queue import WorkQueue, open_queue
from mediaflow.queue.contract import EmissionRun, NewItem, WorkItem
from tests.engine_nodes import Counter, Recorder
from tests.test_engine import FAST


class CountingCommits:
    """A queue that counts, per emitting port, the values of commits that landed."""

    def __init__(self, inner: WorkQueue) -> None:
        self._inner = inner
        self.durable: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit(
        self, batch: Sequence[EmissionRun | NewItem], **options: Any
    ) -> list[WorkItem]:
        claimed = await self._inner.commit(batch, **options)
        for run in batch:
            if isinstance(run, EmissionRun):  # not a run's source items
                self.durable[run.src] = self.durable.get(run.src, 0) + len(run.values)
        return claimed


async def test_a_latest_event_leaves_once_and_after_its_commit_lands(tmp_path: Path) -> None:
    queue = CountingCommits(open_queue(None, tmp_path))
    flow = (
        FlowBuilder("durable")
        .add("src", Counter, count=60, period_s=0.005)
        .add("sink", Recorder, inputs={"chunk": "src.chunk"})
    )
    bus = EventBus()
    told: list[tuple[int, int]] = []  # (seq of the event's value, values durable then)

    def hear(event: Event) -> None:
        if event.type == "latest" and event.data["node"] == "src":
            told.append((event.data["seq"], queue.durable.get("src.chunk", 0)))

    stop_hearing = bus.listen(hear)
    session = FlowSession(
        flow.build(), tmp_path, queue=cast(WorkQueue, queue), settings=FAST, bus=bus
    )
    await session.start()
    try:
        assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
        await asyncio.sleep(0.3)  # the throttle ends a burst with its last value
    finally:
        await session.stop()
        stop_hearing()
    seqs = [seq for seq, _ in told]
    assert told and all(seq <= durable for seq, durable in told), told
    assert seqs == sorted(set(seqs)), seqs  # each value once, in order
    assert seqs[-1] == 60  # the last value is told
