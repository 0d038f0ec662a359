"""A forwarder's rounds (issue 27), one at a time, between a box's journal (SQLite)
and a real Redis: what it sends when a step fails half way, when an earlier
forwarder died holding items, and when the shared queue hangs.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from pathlib import Path

import pytest

from mediaflow.engine.events import EventBus
from mediaflow.forward import plan
from mediaflow.queue.contract import QueueUnavailable
from mediaflow.queue.sqlite import SqliteQueue
from tests.forward_support import LEVELS, journal_levels, levels_box, next_event, shared_items
from tests.redis_server import RedisServer


class AckFailsOnce(SqliteQueue):
    """The box's own journal, whose first ack fails: the forwarder has committed
    to the shared queue and cannot record that here (a crash at that point)."""

    failed = False

    async def ack(self, entry_ids: Sequence[str]) -> int:
        if not self.failed:
            self.failed = True
            raise QueueUnavailable("the box's journal did not answer")
        return await super().ack(entry_ids)


async def test_items_committed_but_not_acked_here_are_not_sent_twice(
    tmp_path: Path, fresh_redis: RedisServer
) -> None:
    local = AckFailsOnce(tmp_path / "queue.sqlite3")
    await journal_levels(local, LEVELS, 5)
    async with levels_box(local, fresh_redis, tmp_path) as forwarder:
        with pytest.raises(QueueUnavailable):
            await forwarder.forward_once()
        assert await forwarder.forward_once() == 5  # found again, below the cursor: acked
        assert await forwarder.forward_once() == 0
        assert (await local.backlog()).get(LEVELS) is None
    items = await shared_items(fresh_redis, LEVELS)
    assert [item.payload["value"] for item in items] == list(range(5))


async def test_what_a_dead_forwarder_held_goes_first_and_is_not_lost(
    tmp_path: Path, fresh_redis: RedisServer
) -> None:
    local = SqliteQueue(tmp_path / "queue.sqlite3")
    await journal_levels(local, LEVELS, 6)
    held = await local.claim("forward:box", {LEVELS: 2})  # the box died holding these
    assert [item.payload["value"] for item in held] == [0, 1]
    async with levels_box(local, fresh_redis, tmp_path) as forwarder:
        while await forwarder.forward_once():
            pass
    items = await shared_items(fresh_redis, LEVELS)
    assert [item.payload["value"] for item in items] == list(range(6))


async def test_a_shared_queue_that_hangs_is_reported_down_while_the_call_waits(
    tmp_path: Path, durable_redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan, "LINK_CHECK_EVERY_S", 3600.0)  # only rounds reach the link
    local = SqliteQueue(tmp_path / "queue.sqlite3")
    await journal_levels(local, LEVELS, 3)
    bus = EventBus()
    events = bus.subscribe(types=frozenset({"forward_unavailable", "forward_available"}))
    pid = durable_redis_server.pid
    assert pid is not None
    async with levels_box(local, durable_redis_server, tmp_path, bus) as forwarder:
        running = asyncio.create_task(forwarder.run())
        try:
            while forwarder.status.forwarded_items < 3:
                await asyncio.sleep(0.05)
            os.kill(pid, signal.SIGSTOP)  # Redis hangs: connections open, no answers
            try:
                await journal_levels(local, LEVELS, 2)
                event = await next_event(events, "forward_unavailable", timeout_s=15)
                assert "has not answered" in event.data["error"]
                assert not forwarder.status.link_up and forwarder.status.forwarded_items == 3
            finally:
                os.kill(pid, signal.SIGCONT)
            event = await next_event(events, "forward_available", timeout_s=15)
            assert event.data["failed_rounds"] == 0, "the call waited, then went through"
            while forwarder.status.forwarded_items < 5:
                await asyncio.sleep(0.05)
            assert forwarder.status.link_up
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    items = await shared_items(durable_redis_server, LEVELS)
    assert [item.payload["value"] for item in items] == [0, 1, 2, 0, 1], "each once, in order"
