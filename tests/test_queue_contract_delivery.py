"""The work-queue contract of handing work out, run against every backend in
``QUEUE_BACKENDS``, of the Delivery role: committing single items (seq and
order), claims (counted, or made with ``claim_for`` in the commit itself), ack,
touch and release, and stale claims reclaimed.

Each test uses the ``queue`` fixture (one opened handle) and, where two
consumers are needed, ``queue_backend.open()`` for another handle on the same
backend (``tests/conftest.py``). Times are real but short. What waits in the
queue (the backlog, the stats, a reopen) has its part of the suite in
``tests/test_queue_contract_inspection.py``, parking in
``tests/test_queue_contract_gate.py``, group commits of runs and acks by batch
in ``tests/test_queue_contract_delivery_commit.py``, latest values and a
commit's acks and latest values in ``tests/test_queue_contract_latest_values.py``,
random interleavings of all of them in ``tests/test_queue_commit_props.py``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from mediaflow.queue import Delivery, NewItem, StreamKey, WorkItem, WorkQueue
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

ROLE = Delivery
"""The role of the queue this module holds the contract of (see
``tests/test_queue_contract_roles.py``)."""

# -- commit, seq and order -----------------------------------------------------


async def test_enqueue_returns_items_as_stored(queue: WorkQueue) -> None:
    before = time.time()
    stored = await queue.commit(
        [
            NewItem(A, "emission", {"n": 0, "nested": {"x": [1, 2.5, None]}}),
            NewItem(B, "source", {}),
        ]
    )

    assert [(i.stream, i.kind, i.seq, i.deliveries) for i in stored] == [
        (A, "emission", 1, 0),
        (B, "source", 1, 0),
    ]
    assert stored[0].payload == {"n": 0, "nested": {"x": [1, 2.5, None]}}
    assert len(set(ids(stored))) == 2
    assert all(before <= i.enqueued_at <= time.time() for i in stored)
    assert not stored[0].redelivery


async def test_empty_enqueue_is_a_no_op(queue: WorkQueue) -> None:
    assert await queue.commit([]) == []
    assert (await queue.stats()).enqueued == 0


@pytest.mark.parametrize(
    ("streams", "expected_seqs"),
    [
        ([A, A, A], [1, 2, 3]),
        ([A, B, A, C, B, A], [1, 1, 2, 1, 2, 3]),
        ([C], [1]),
    ],
)
async def test_seq_counts_per_stream_without_gaps(
    queue: WorkQueue, streams: list[StreamKey], expected_seqs: list[int]
) -> None:
    one_call = await queue.commit([new(s, i) for i, s in enumerate(streams)])
    one_by_one = [(await queue.commit([new(s, i)]))[0] for i, s in enumerate(streams)]

    assert [i.seq for i in one_call] == expected_seqs
    offset = {s: streams.count(s) for s in streams}
    assert [i.seq - offset[i.stream] for i in one_by_one] == expected_seqs


async def test_seq_and_ids_continue_after_everything_is_acked(queue: WorkQueue) -> None:
    first = await fill(queue, A, 3)
    claimed = await queue.claim("c", {A: 3})
    assert await queue.ack(ids(claimed)) == 3

    later = await fill(queue, A, 2)

    assert [i.seq for i in later] == [4, 5]
    assert not set(ids(first)) & set(ids(later))


async def test_enqueue_refuses_a_payload_that_is_not_json(queue: WorkQueue) -> None:
    with pytest.raises((TypeError, ValueError)):
        await queue.commit([new(A, 0), NewItem(A, "emission", {"bad": object()})])

    assert await queue.claim("c", {A: 10}) == []
    assert (await queue.stats()).enqueued == 0


async def test_claim_hands_out_a_stream_oldest_first(queue: WorkQueue) -> None:
    await fill(queue, A, 5)

    first = await queue.claim("c", {A: 2})
    rest = await queue.claim("c", {A: 10})

    assert ns(first) == [0, 1]
    assert ns(rest) == [2, 3, 4]
    assert [i.seq for i in first + rest] == [1, 2, 3, 4, 5]
    assert all(i.deliveries == 1 for i in first + rest)


@pytest.mark.parametrize(
    ("wants", "expected"),
    [
        ({A: 2, B: 1}, {A: 2, B: 1}),
        ({A: 10}, {A: 3}),
        ({A: 0, B: 2}, {B: 2}),
        ({C: 5}, {}),  # nothing was ever enqueued there
        ({}, {}),
    ],
)
async def test_claim_respects_the_count_asked_per_stream(
    queue: WorkQueue, wants: dict[StreamKey, int], expected: dict[StreamKey, int]
) -> None:
    await fill(queue, A, 3)
    await fill(queue, B, 3)

    claimed = await queue.claim("c", wants)

    counts: dict[StreamKey, int] = {}
    for item in claimed:
        counts[item.stream] = counts.get(item.stream, 0) + 1
    assert counts == expected


async def test_two_consumers_never_get_the_same_item(queue_backend: QueueBackend) -> None:
    producer = queue_backend.open()
    first, second = queue_backend.open(), queue_backend.open()
    stored = await fill(producer, A, 300)

    async def drain(handle: WorkQueue, name: str) -> list[WorkItem]:
        got: list[WorkItem] = []
        while batch := await handle.claim(name, {A: 7}):
            got += batch
            await asyncio.sleep(0)
        return got

    a, b = await asyncio.gather(drain(first, "one"), drain(second, "two"))

    assert sorted(ids(a) + ids(b)) == sorted(ids(stored))
    assert ns(a) == sorted(ns(a)) and ns(b) == sorted(ns(b))


# -- ack, touch, release -------------------------------------------------------


async def test_ack_counts_pending_items_and_ignores_the_rest(queue: WorkQueue) -> None:
    await fill(queue, A, 3)
    claimed = await queue.claim("c", {A: 2})
    cases: list[tuple[list[str], int]] = [
        ([claimed[0].entry_id], 1),
        ([claimed[0].entry_id], 0),  # acked already
        ([claimed[1].entry_id, "not-an-id", "999999999", "-1", "9" * 30], 1),
        ([], 0),
    ]
    for entry_ids, expected in cases:
        assert await queue.ack(entry_ids) == expected, entry_ids

    # The ready item was never claimed: acking it does not remove it.
    [ready] = await queue.claim("c", {A: 5})
    assert ready.payload == {"n": 2}


async def test_ack_removes_items_whoever_holds_them(queue: WorkQueue) -> None:
    await fill(queue, A, 1)
    [item] = await queue.claim("first", {A: 1})
    await asyncio.sleep(PAST_IDLE_S)
    await queue.reclaim_stale(IDLE_MS)
    [again] = await queue.claim("second", {A: 1})

    assert await queue.ack([item.entry_id]) == 1
    assert await queue.touch("second", [again.entry_id]) == 0


async def test_touch_counts_only_items_the_consumer_still_holds(queue: WorkQueue) -> None:
    await fill(queue, A, 3)
    mine = await queue.claim("me", {A: 2})
    [theirs] = await queue.claim("them", {A: 1})
    await queue.ack([mine[1].entry_id])

    cases: list[tuple[str, list[str], int]] = [
        ("me", ids(mine), 1),  # the second was acked
        ("me", [theirs.entry_id], 0),
        ("them", [theirs.entry_id, "nope"], 1),
        ("nobody", [*ids(mine), theirs.entry_id], 0),
    ]
    for consumer, entry_ids, expected in cases:
        assert await queue.touch(consumer, entry_ids) == expected, (consumer, entry_ids)


async def test_touch_keeps_an_item_from_going_stale(queue: WorkQueue) -> None:
    await fill(queue, A, 2)
    touched, untouched = await queue.claim("c", {A: 2})

    # Sleeps only overrun: the untouched item is surely idle past 1 s, and the
    # touched one stays fresh unless the machine stalls for a second.
    await asyncio.sleep(1.1)
    assert await queue.touch("c", [touched.entry_id]) == 1
    released = await queue.reclaim_stale(1000)

    assert ids(released) == [untouched.entry_id]


async def test_release_hands_items_back_first_in_line(queue: WorkQueue) -> None:
    await fill(queue, A, 3)
    first, second = await queue.claim("c", {A: 2})

    assert await queue.release([first.entry_id, "unknown"]) == 1
    assert await queue.release([first.entry_id]) == 0  # not pending any more

    again = await queue.claim("d", {A: 5})
    assert ns(again) == [0, 2]
    assert [i.deliveries for i in again] == [2, 1]
    assert again[0].redelivery
    assert await queue.touch("c", [second.entry_id]) == 1


async def test_release_consumer_hands_back_all_it_holds(queue: WorkQueue) -> None:
    await fill(queue, A, 2)
    await fill(queue, B, 2)
    await queue.claim("dead", {A: 2, B: 1})
    [alive] = await queue.claim("alive", {B: 1})

    assert await queue.release_consumer("dead") == 3
    assert await queue.release_consumer("dead") == 0

    again = await queue.claim("new", {A: 5, B: 5})
    assert sorted((i.stream.node, i.seq, i.deliveries) for i in again) == [
        ("a", 1, 2),
        ("a", 2, 2),
        ("b", 1, 2),
    ]
    assert await queue.touch("alive", [alive.entry_id]) == 1


async def test_release_of_unstarted_items_takes_their_delivery_back(queue: WorkQueue) -> None:
    await fill(queue, A, 2)
    first, second = await queue.claim("c", {A: 2})

    assert await queue.release([second.entry_id], started=False) == 1
    assert await queue.release([first.entry_id]) == 1

    again = await queue.claim("d", {A: 5})
    assert [(i.seq, i.deliveries, i.redelivery) for i in again] == [(1, 2, True), (2, 1, False)]


# -- claim_for -----------------------------------------------------------------


async def test_claim_for_claims_new_items_in_the_same_call(queue: WorkQueue) -> None:
    stored = await queue.commit([new(A, 0), new(B, 1)], claim_for="me")

    assert [i.deliveries for i in stored] == [1, 1]
    assert await queue.claim("other", {A: 5, B: 5}) == []
    assert await queue.touch("me", ids(stored)) == 2
    assert await queue.ack(ids(stored)) == 2


@pytest.mark.parametrize(
    ("setup", "item_options", "claimed"),
    [
        ("nothing", {}, True),
        ("nothing", {"claim": False}, False),  # the caller said no
        ("older ready", {}, False),  # it would overtake the older item
        ("older pending", {}, True),  # in flight already: order is kept
        ("flow parked", {}, False),
        ("other flow parked", {}, True),
    ],
)
async def test_claim_for_keeps_order_and_parking(
    queue: WorkQueue, setup: str, item_options: dict[str, Any], claimed: bool
) -> None:
    if setup == "older ready":
        await fill(queue, A, 1)
    elif setup == "older pending":
        await fill(queue, A, 1)
        await queue.claim("someone", {A: 1})
    elif setup == "flow parked":
        await queue.park(A.flow)
    elif setup == "other flow parked":
        await queue.park(C.flow)

    [item] = await queue.commit([new(A, 9, **item_options)], claim_for="me")

    assert item.deliveries == (1 if claimed else 0)
    assert await queue.touch("me", [item.entry_id]) == (1 if claimed else 0)


async def test_claim_for_stops_claiming_behind_an_unclaimed_item(queue: WorkQueue) -> None:
    stored = await queue.commit(
        [new(A, 0), new(A, 1, claim=False), new(A, 2), new(B, 3)], claim_for="me"
    )

    assert [(i.stream, i.deliveries) for i in stored] == [(A, 1), (A, 0), (A, 0), (B, 1)]
    assert ns(await queue.claim("other", {A: 5})) == [1, 2]


async def test_parked_items_enqueued_with_claim_for_wait_for_unpark(queue: WorkQueue) -> None:
    await queue.park(A.flow)
    [item] = await queue.commit([new(A, 0)], claim_for="me")
    assert await queue.claim("me", {A: 5}) == []

    await queue.unpark(A.flow)

    assert ids(await queue.claim("me", {A: 5})) == [item.entry_id]


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
