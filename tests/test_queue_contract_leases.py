"""The work-queue contract of leases, run against every backend in
``QUEUE_BACKENDS`` (fixtures ``queue``, ``queue_backend``): executors of a flow
share its ordered streams, one holder per stream at a time (``lease``).

A lease is taken only when free or expired, renewed only by its holder while it
lives, and dropped by ``release``, ``leave`` or ``release_consumer``. Taking a
stream over from a holder that lost it hands that holder's pending items back,
so the new holder claims them first, in order, as redeliveries; and nobody else
claims on a stream while its lease lives, so nothing overtakes them.
"""

from __future__ import annotations

import asyncio

from mediaflow.queue import Leases, StreamKey, WorkQueue
from tests.conftest import QueueBackend
from tests.queue_contract_helpers import A, B, C, fill, new, ns

ROLE = Leases
"""The role of the queue this module holds the contract of (see
``tests/test_queue_contract_roles.py``)."""

TTL_MS = 300
PAST_TTL_S = 0.35


async def test_a_lone_executor_acquires_every_free_stream(queue: WorkQueue) -> None:
    table = await queue.lease("f1", "w1", ttl_ms=10_000, acquire=[A, B])
    assert table.holders == {A: "w1", B: "w1"}
    assert table.members == ("w1",)
    assert table.held_by("w1") == {A, B}
    assert table.taken_over == frozenset()


async def test_a_held_stream_is_not_taken_and_a_free_one_is(queue: WorkQueue) -> None:
    await queue.lease("f1", "w1", ttl_ms=10_000, acquire=[A])
    table = await queue.lease("f1", "w2", ttl_ms=10_000, acquire=[A, B])
    assert table.holders == {A: "w1", B: "w2"}
    assert table.members == ("w1", "w2")


async def test_flows_keep_their_leases_and_members_apart(queue: WorkQueue) -> None:
    await queue.lease("f1", "w1", ttl_ms=10_000, acquire=[A])
    table = await queue.lease("f2", "w2", ttl_ms=10_000, acquire=[C])
    assert table.holders == {C: "w2"}
    assert table.members == ("w2",)


async def test_hold_renews_and_an_expired_lease_goes_to_whoever_asks(queue: WorkQueue) -> None:
    # Sleeps only overrun: B is surely expired (0.8 + 0.25 s > 1 s), and A,
    # renewed 0.25 s ago, lives on unless the machine stalls for 0.75 s.
    await queue.lease("f1", "w1", ttl_ms=1000, acquire=[A, B])
    await asyncio.sleep(0.8)
    await queue.lease("f1", "w1", ttl_ms=1000, hold=[A])  # B is not renewed
    await asyncio.sleep(0.25)
    table = await queue.lease("f1", "w2", ttl_ms=10_000, acquire=[A, B])
    assert table.holders == {A: "w1", B: "w2"}
    await asyncio.sleep(1.0)
    table = await queue.lease("f1", "w2", ttl_ms=10_000, acquire=[A])
    assert table.holders == {A: "w2", B: "w2"}
    assert table.members == ("w2",)  # w1's membership expired with its leases


async def test_a_lost_lease_is_not_renewed_by_its_old_holder(queue: WorkQueue) -> None:
    await queue.lease("f1", "w1", ttl_ms=TTL_MS, acquire=[A])
    await asyncio.sleep(PAST_TTL_S)
    await queue.lease("f1", "w2", ttl_ms=10_000, acquire=[A])
    table = await queue.lease("f1", "w1", ttl_ms=10_000, hold=[A])
    assert table.holders == {A: "w2"}


async def test_release_and_leave_drop_leases(queue: WorkQueue) -> None:
    await queue.lease("f1", "w1", ttl_ms=10_000, acquire=[A, B])
    table = await queue.lease("f1", "w1", ttl_ms=10_000, release=[A])
    assert table.holders == {B: "w1"}
    table = await queue.lease("f1", "w2", ttl_ms=10_000, release=[B])  # not w2's to drop
    assert table.holders == {B: "w1"}
    table = await queue.lease("f1", "w1", ttl_ms=10_000, leave=True)
    assert table.holders == {}
    assert table.members == ("w2",)


async def test_release_consumer_drops_its_leases_and_membership(queue: WorkQueue) -> None:
    await queue.lease("f1", "w1", ttl_ms=10_000, acquire=[A])
    await queue.lease("f2", "w1", ttl_ms=10_000, acquire=[C])
    await queue.lease("f1", "w2", ttl_ms=10_000)
    await queue.release_consumer("w1")
    table = await queue.lease("f1", "w2", ttl_ms=10_000, acquire=[A])
    assert table.holders == {A: "w2"}
    assert table.members == ("w2",)
    assert (await queue.lease("f2", "w3", ttl_ms=10_000)).holders == {}


async def test_taking_over_hands_back_the_old_holders_items_first_in_order(
    queue: WorkQueue,
) -> None:
    await fill(queue, A, 6)
    await queue.lease("f1", "w1", ttl_ms=TTL_MS, acquire=[A])
    held = await queue.claim("w1", {A: 3})
    assert ns(held) == [0, 1, 2]
    await queue.ack([held[0].entry_id])
    await asyncio.sleep(PAST_TTL_S)  # w1 died: its lease lapses, its items stay pending
    table = await queue.lease("f1", "w2", ttl_ms=10_000, acquire=[A])
    assert table.holders == {A: "w2"}
    assert table.taken_over == {A}
    claimed = await queue.claim("w2", {A: 10})
    assert ns(claimed) == [1, 2, 3, 4, 5]
    assert [item.deliveries for item in claimed] == [2, 2, 1, 1, 1]


async def test_a_clean_handover_hands_back_nothing(queue: WorkQueue) -> None:
    await fill(queue, B, 2)
    await queue.lease("f1", "w1", ttl_ms=10_000, acquire=[B])
    held = await queue.claim("w1", {B: 1})
    await queue.ack([held[0].entry_id])
    await queue.lease("f1", "w1", ttl_ms=10_000, release=[B])
    table = await queue.lease("f1", "w2", ttl_ms=10_000, acquire=[B])
    assert table.taken_over == frozenset()
    assert [item.deliveries for item in await queue.claim("w2", {B: 5})] == [1]


async def test_leases_are_shared_by_handles_of_one_backend(queue_backend: QueueBackend) -> None:
    first, second = queue_backend.open(), queue_backend.open()
    await first.lease("f1", "w1", ttl_ms=10_000, acquire=[A])
    table = await second.lease("f1", "w2", ttl_ms=10_000, acquire=[A, StreamKey("f1", "x")])
    assert table.holders == {A: "w1", StreamKey("f1", "x"): "w2"}


async def test_taking_again_a_lease_that_lapsed_hands_back_the_takers_own_items(
    queue: WorkQueue,
) -> None:
    """An executor whose lease lapsed unrenewed dropped its line from memory (the
    engine's ``leasing``); taking the stream again, nobody having taken it
    meanwhile, its own pending items come back first, in order."""
    await fill(queue, A, 5)
    await queue.lease("f1", "w1", ttl_ms=TTL_MS, acquire=[A])
    held = await queue.claim("w1", {A: 3})
    await asyncio.sleep(PAST_TTL_S)
    table = await queue.lease("f1", "w1", ttl_ms=10_000, acquire=[A])
    assert table.holders == {A: "w1"} and table.taken_over == {A}
    claimed = await queue.claim("w1", {A: 10})
    assert ns(claimed) == [0, 1, 2, 3, 4]
    assert [item.deliveries for item in claimed] == [2, 2, 2, 1, 1]
    assert ns(held) == [0, 1, 2]


async def test_a_claim_on_a_stream_leased_to_another_takes_nothing(queue: WorkQueue) -> None:
    """A chaos run with Redis killed: an old holder's claim, sent before the lease
    moved and run after it (a call in doubt, sent again once Redis was back), took
    the items handed back to the new holder, who read on past them: out of order."""
    await fill(queue, A, 4)
    await fill(queue, B, 2)
    await queue.lease("f1", "w1", ttl_ms=TTL_MS, acquire=[A])
    assert ns(await queue.claim("w1", {A: 2})) == [0, 1]
    await asyncio.sleep(PAST_TTL_S)  # w1's lease lapses
    await queue.lease("f1", "w2", ttl_ms=10_000, acquire=[A])
    assert await queue.claim("w1", {A: 10}) == []  # w1's late claim: nothing
    assert ns(await queue.claim("w1", {B: 10})) == [0, 1]  # a stream nobody leases
    # nor at enqueue: the item waits for the holder, in line
    [item] = await queue.commit([new(A, 4)], claim_for="w1")
    assert item.deliveries == 0
    claimed = await queue.claim("w2", {A: 10})
    assert ns(claimed) == [0, 1, 2, 3, 4]
    assert [i.deliveries for i in claimed] == [2, 2, 1, 1, 1]
    # an expired lease, or one's own, stops nobody
    await queue.lease("f1", "w2", ttl_ms=TTL_MS, hold=[A])
    await fill(queue, A, 1, start=5)
    assert ns(await queue.claim("w2", {A: 10})) == [5]
    await asyncio.sleep(PAST_TTL_S)
    await fill(queue, A, 1, start=6)
    assert ns(await queue.claim("w1", {A: 10})) == [6]
