"""The work-queue contract of what waits in the queue, run against every backend in
``QUEUE_BACKENDS``, of the Inspection role: the backlog and the stats, and the
queue's state across a close and reopen.

Each test uses the ``queue`` fixture (one opened handle) and, where a reopen is
needed, ``queue_backend.open()`` for another handle on the same backend
(``tests/conftest.py``). Times are real but short: idle thresholds of ~100 ms.
Handing work out (commit, claim, ack, touch, release, reclaim) is tested in
``tests/test_queue_contract_delivery.py``.
"""

from __future__ import annotations

import asyncio

from mediaflow.queue import Inspection, StreamBacklog, WorkQueue
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

ROLE = Inspection
"""The role of the queue this module holds the contract of (see
``tests/test_queue_contract_roles.py``)."""

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
