"""The work-queue contract of what waits in the queue, run against every backend in
``QUEUE_BACKENDS``: stale claims reclaimed, dead letters, the
backlog, parked flows, the stats, and all of it across a close and reopen.

Each test uses the ``queue`` fixture (one opened handle) and, where a reopen is
needed, ``queue_backend.open()`` for another handle on the same backend
(``tests/conftest.py``). Times are real but short: idle thresholds of ~100 ms.
Handing work out (enqueue, claim, ack, touch, release) is tested in
``tests/test_queue_contract_claims.py``.
"""

from __future__ import annotations

import asyncio

import pytest

from mediaflow.queue import StreamBacklog, WorkQueue
from tests.conftest import QueueBackend
from tests.queue_contract_helpers import (
    IDLE_MS,
    PAST_IDLE_S,
    A,
    B,
    C,
    fill,
    ids,
    new,
    ns,
)

# -- reclaim -------------------------------------------------------------------


async def test_reclaim_stale_makes_items_ready_and_counts_the_redelivery(
    queue: WorkQueue,
) -> None:
    await fill(queue, A, 2)
    stale = await queue.claim("crashed", {A: 2})
    assert await queue.reclaim_stale(10_000) == []  # not idle long enough yet

    await asyncio.sleep(PAST_IDLE_S)
    released = await queue.reclaim_stale(IDLE_MS)

    assert ids(released) == ids(stale)
    assert await queue.touch("crashed", ids(stale)) == 0
    again = await queue.claim("rescuer", {A: 5})
    assert ids(again) == ids(stale)
    assert [i.deliveries for i in again] == [2, 2]
    assert all(i.redelivery for i in again)
    assert (await queue.stats()).redelivered == 2


async def test_reclaimed_items_go_to_the_next_claimer(queue: WorkQueue) -> None:
    await fill(queue, A, 2)
    stale = await queue.claim("crashed", {A: 2})
    await asyncio.sleep(PAST_IDLE_S)

    await queue.reclaim_stale(IDLE_MS)
    reclaimed = await queue.claim("rescuer", {A: 5})

    assert ids(reclaimed) == ids(stale)
    assert [(i.seq, i.deliveries, i.payload) for i in reclaimed] == [
        (1, 2, {"n": 0}),
        (2, 2, {"n": 1}),
    ]
    assert await queue.touch("rescuer", ids(reclaimed)) == 2
    assert await queue.touch("crashed", ids(reclaimed)) == 0
    assert await queue.claim("other", {A: 5}) == []
    assert (await queue.stats()).redelivered == 2


# -- dead letters --------------------------------------------------------------


async def test_dead_letter_takes_an_item_out_of_circulation(queue: WorkQueue) -> None:
    await fill(queue, A, 2)
    await fill(queue, C, 1)
    a0, a1 = await queue.claim("c", {A: 2})
    [c0] = await queue.claim("c", {C: 1})

    await queue.dead_letter(a0, "failed 5 times")
    await queue.dead_letter(c0, "poison")
    await queue.dead_letter(a1, "failed too")

    assert await queue.ack([a0.entry_id, c0.entry_id]) == 0
    assert await queue.claim("c", {A: 5, C: 5}) == []
    assert sum(b.total for b in (await queue.backlog()).values()) == 0
    letters = await queue.dead_letters()
    assert [(d.item.entry_id, d.reason) for d in letters] == [
        (a1.entry_id, "failed too"),
        (c0.entry_id, "poison"),
        (a0.entry_id, "failed 5 times"),
    ]
    assert letters[-1].item == a0
    assert [d.item.stream for d in await queue.dead_letters("f2")] == [C]
    assert len(await queue.dead_letters(limit=1)) == 1
    assert all(d.dead_at >= a0.enqueued_at for d in letters)
    assert (await queue.stats()).dead_lettered == 3


# -- backlog -------------------------------------------------------------------


async def test_backlog_counts_waiting_work_per_stream(queue: WorkQueue) -> None:
    a_items = await fill(queue, A, 4)
    b_items = await fill(queue, B, 2)
    c_items = await fill(queue, C, 1)
    await queue.claim("c", {A: 1, B: 2, C: 1})
    await queue.ack([c_items[0].entry_id])

    backlog = await queue.backlog()

    assert {s: b for s, b in backlog.items() if b.total} == {
        A: StreamBacklog(ready=3, pending=1, delayed=0, oldest_enqueued_at=a_items[0].enqueued_at),
        B: StreamBacklog(ready=0, pending=2, delayed=0, oldest_enqueued_at=b_items[0].enqueued_at),
    }
    assert {f: n for f, n in (await queue.backlog_flows()).items() if n} == {"f1": 6}


async def test_backlog_of_an_empty_queue(queue: WorkQueue) -> None:
    assert not any(b.total for b in (await queue.backlog()).values())
    assert not any((await queue.backlog_flows()).values())


# -- park and unpark -----------------------------------------------------------


async def test_parked_flow_hands_out_nothing_until_unparked(queue: WorkQueue) -> None:
    await fill(queue, A, 2)
    await fill(queue, C, 2)

    await queue.park("f1")
    assert await queue.parked() == {"f1": None}
    assert {i.stream for i in await queue.claim("c", {A: 5, C: 5})} == {C}

    await queue.unpark("f1")
    assert await queue.parked() == {}
    assert ns(await queue.claim("c", {A: 5})) == [0, 1]


@pytest.mark.parametrize(("steps", "wants", "handed_out"), [(1, 5, 1), (3, 2, 2), (3, 5, 3)])
async def test_unpark_with_steps_lets_exactly_that_many_through(
    queue: WorkQueue, steps: int, wants: int, handed_out: int
) -> None:
    await fill(queue, A, 5)
    await queue.park("f1")

    await queue.unpark("f1", steps=steps)
    first = await queue.claim("c", {A: wants})
    rest = await queue.claim("c", {A: 5})

    assert len(first) + len(rest) == steps
    assert len(first) == handed_out
    assert ns(first + rest) == list(range(steps))
    assert await queue.parked() == {"f1": None}
    assert await queue.claim("c", {A: 5}) == []


async def test_steps_are_shared_by_the_streams_of_a_flow(queue: WorkQueue) -> None:
    await fill(queue, A, 3)
    await fill(queue, B, 3)
    await queue.park("f1")
    await queue.unpark("f1", steps=4)

    claimed = await queue.claim("c", {A: 3, B: 3})

    assert len(claimed) == 4
    assert await queue.parked() == {"f1": None}


async def test_park_again_cancels_steps_left(queue: WorkQueue) -> None:
    await queue.unpark("f1", steps=3)
    assert await queue.parked() == {"f1": 3}
    await queue.park("f1")
    assert await queue.parked() == {"f1": None}


# -- stats and reopening -------------------------------------------------------


async def test_stats_counts_what_happened(queue: WorkQueue) -> None:
    await fill(queue, A, 4)
    await queue.commit([new(C, 0)], claim_for="c")
    claimed = await queue.claim("c", {A: 3})
    await queue.ack(ids(claimed[:2]))
    await queue.dead_letter(claimed[2], "bad")
    await queue.release_consumer("c")
    await queue.claim("c", {C: 1})  # a redelivery
    await queue.park("f1")

    stats = await queue.stats()

    assert (stats.enqueued, stats.acked, stats.dead_lettered, stats.redelivered) == (5, 2, 1, 1)
    assert stats.backlog == 2
    assert stats.parked_flows == ("f1",)


async def test_closed_and_reopened_queue_keeps_its_state(queue_backend: QueueBackend) -> None:
    first = queue_backend.open()
    await fill(first, A, 3)
    pending = await first.claim("c", {A: 2})
    await first.ack([pending[0].entry_id])
    await first.park("f2")
    await first.close()
    await first.close()  # idempotent

    second = queue_backend.open()
    stats = await second.stats()
    assert (stats.enqueued, stats.acked, stats.backlog) == (3, 1, 2)
    assert await second.parked() == {"f2": None}
    third = await second.claim("d", {A: 5})
    assert ns(third) == [2]  # the pending one stays pending
    assert await second.ack(ids(third)) == 1
    assert await second.touch("c", [pending[1].entry_id]) == 1
    await asyncio.sleep(PAST_IDLE_S)
    assert ids(await second.reclaim_stale(IDLE_MS)) == [pending[1].entry_id]
    assert ids(await second.claim("d", {A: 5})) == [pending[1].entry_id]
    assert [i.seq for i in await fill(second, A, 1)] == [4]
