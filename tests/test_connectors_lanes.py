"""Encoding lanes: bounded in, bounded out, order kept, skips counted, errors delivered."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from connectors._emit import emit_lane
from connectors._lanes import EncodeLane, drain
from devices import BridgeClosed
from mediaflow import MediaRef


class GatedWork:
    """Multiplies by 10 once ``gate`` is open; fails on ``fail_on``; flush yields -1."""

    def __init__(self, fail_on: int | None = None, delay_s: float = 0.0) -> None:
        self.gate = threading.Event()
        self.fail_on = fail_on
        self.delay_s = delay_s

    def push(self, job: int) -> list[int]:
        self.gate.wait(5)
        time.sleep(self.delay_s)
        if job == self.fail_on:
            raise ValueError(f"cannot encode {job}")
        return [job * 10]

    def flush(self) -> list[int]:
        return [-1]


async def wait_until_taken(lane: EncodeLane[int, int], in_flight: int) -> None:
    while lane.statistics().in_flight != in_flight:
        await asyncio.sleep(0.001)


async def test_offer_skips_at_the_edge_when_full_and_keeps_order() -> None:
    work = GatedWork()
    lane: EncodeLane[int, int] = EncodeLane("test", work, capacity=2)
    assert lane.offer(1) and lane.offer(2)
    assert not lane.offer(3)  # one being encoded, one queued: full
    stats = lane.statistics()
    assert (stats.accepted, stats.skipped, stats.in_flight) == (2, 1, 2)
    work.gate.set()
    assert [await lane.get(), await lane.get()] == [10, 20]
    await wait_until_taken(lane, 0)
    assert lane.offer(4)
    lane.cut()  # flushes between jobs
    lane.finish()
    assert await drain(lane) == [40, -1, -1]  # the cut's flush, then the end's
    await lane.close()


async def test_put_waits_for_room_and_loses_nothing() -> None:
    work = GatedWork(delay_s=0.005)
    work.gate.set()
    lane: EncodeLane[int, int] = EncodeLane("test", work, capacity=1, results=1)
    reader = asyncio.create_task(drain(lane))
    for job in range(20):
        await lane.put(job)
        assert lane.statistics().in_flight <= 1
    lane.finish()
    assert await reader == [j * 10 for j in range(20)] + [-1]
    assert lane.statistics().skipped == 0
    await lane.close()


async def test_a_worker_error_reaches_the_reader_after_the_results_before_it() -> None:
    work = GatedWork(fail_on=2)
    work.gate.set()
    lane: EncodeLane[int, int] = EncodeLane("test", work, capacity=4)
    for job in (1, 2, 3):
        lane.offer(job)
    assert await lane.get() == 10
    with pytest.raises(ValueError, match="cannot encode 2"):
        await lane.get()
    await lane.close()


async def test_close_stops_a_worker_blocked_on_an_unread_result() -> None:
    work = GatedWork()
    work.gate.set()
    lane: EncodeLane[int, int] = EncodeLane("test", work, capacity=8, results=1)
    for job in range(5):
        lane.offer(job)
    started = time.monotonic()
    await lane.close()
    assert time.monotonic() - started < 1.0
    with pytest.raises(BridgeClosed):
        await lane.get()


async def test_saves_ahead_overlap_and_publish_in_lane_order() -> None:
    # Save times 40, 5, 5, 5 ms: with three saves ahead the short ones run while the
    # first is still writing, and nothing is published out of order.
    work = GatedWork()
    work.gate.set()
    lane: EncodeLane[int, int] = EncodeLane("test", work, capacity=8)
    running: list[int] = []
    overlap: list[int] = []
    published: list[str] = []

    async def save(result: int) -> MediaRef:
        running.append(result)
        overlap.append(len(running))
        await asyncio.sleep(0.04 if result == 10 else 0.005)
        running.remove(result)
        return MediaRef(f"sha256:{result % 256:064x}", "image/jpeg", 1, {})

    async def publish(ref: MediaRef) -> None:
        published.append(ref.digest)

    for job in (1, 2, 3, 4):
        await lane.put(job)
    lane.finish()
    await emit_lane(lane, save, publish, ahead=3)
    assert published == [f"sha256:{n % 256:064x}" for n in (10, 20, 30, 40, -1)]
    assert max(overlap) >= 3  # later saves ran while the first was still writing
    await lane.close()


async def test_a_failed_save_ahead_stops_the_lane_and_cancels_the_rest() -> None:
    work = GatedWork()
    work.gate.set()
    lane: EncodeLane[int, int] = EncodeLane("test", work, capacity=8)
    cancelled: list[int] = []
    published: list[int] = []

    async def save(result: int) -> MediaRef:
        try:
            await asyncio.sleep({10: 0.05, 20: 0.1}.get(result, 5.0))
        except asyncio.CancelledError:
            cancelled.append(result)
            raise
        if result == 20:
            raise OSError(28, "No space left on device")
        return MediaRef(f"sha256:{result:064x}", "image/jpeg", 1, {})

    async def publish(ref: MediaRef) -> None:
        published.append(int(ref.digest.split(":")[1], 16))

    for job in (1, 2, 3):
        await lane.put(job)
    lane.finish()
    with pytest.raises(OSError, match="No space left"):
        await emit_lane(lane, save, publish, ahead=3)
    assert published == [10]  # in order: nothing after the failed save
    assert 30 in cancelled
    await lane.close()
