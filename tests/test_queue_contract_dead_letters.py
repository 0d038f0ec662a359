"""The work-queue contract of dead letters as an operator handles them (the
DeadLetters role; taking an item out of circulation, Delivery's ``dead_letter``,
comes first), run against every backend in ``QUEUE_BACKENDS`` (fixtures
``queue``, ``queue_backend``): read
them (``dead_letters``, ``dead_letter_of``), put one back to run again
(``requeue_dead_letter``) or discard it (``delete_dead_letter``), each named by its
``DeadLetter.id``.

An id is unique across flows, stable, URL-safe and free of the flow's name. An id
of another flow, an unknown one or one that is no id at all is "not found" (None or
False), never an error, and changes nothing. A requeued item keeps its payload and
its deliveries (the next claim is a redelivery), goes behind every item waiting in
its stream, waits while its flow is parked, and garbage collection sees its
references throughout the move.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import sqlite3
from typing import Any

import pytest

from mediaflow.queue import DeadLetter, DeadLetters, NewItem, StreamKey, WorkItem, WorkQueue
from tests.conftest import QueueBackend
from tests.queue_contract_helpers import A, B, C, fill, ids, new, ns

ROLE = DeadLetters
"""The role of the queue this module holds the contract of (see
``tests/test_queue_contract_roles.py``)."""

SLASHED = StreamKey("cams/desk", "a")  # a flow's name may hold a "/"

PAYLOAD: dict[str, Any] = {
    "src": "cam.image",
    "port": "image",
    "value": {
        "$ref": {
            "digest": "sha256:" + hashlib.sha256(b"frame").hexdigest(),
            "media_type": "image/jpeg",
            "size": 48_213,
            "meta": {"seq": 7, "pts": 1 / 3, "width": 1280, "tags": ["ünï", "🎥", ""]},
        },
        "floats": [0.1 + 0.2, 1e-300, -0.0, 1.0, 2**63],
        "nested": {"empty": {}, "list": [], "none": None, "yes": True},
    },
    "at": 1712345678.123456,
}

# Not ids of either backend: an SQLite id is decimal digits, a Redis one three
# numbers joined by "-". Both shapes appear below with something wrong with them.
MALFORMED = [
    "",
    "abc",
    "-1",
    "0",
    "01",
    "1.5",
    "1e3",
    "0x10",
    " 1",
    "1\n",
    "\u0661",  # an Arabic-Indic digit one: str.isdigit, not an id
    "1" * 40,
    "1-2",
    "1-2-3-4",
    "01-2-3",
    "1--2",
    "1-99999999999999999999999-0",
    "../1",
    "f1/1",
    "%31",
]


def digest(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


async def live(queue: WorkQueue) -> set[str]:
    found: set[str] = set()
    async for digests in queue.live_digests(batch=1):
        found.update(digests)
    return found


async def dead(queue: WorkQueue, stream: StreamKey, n: int, *, reason: str = "boom") -> WorkItem:
    """Enqueue item ``n`` of ``stream``, claimed once, and dead-letter it."""
    [item] = await queue.commit([new(stream, n)], claim_for="c")
    await queue.dead_letter(item, reason)
    return item


async def only_letter(queue: WorkQueue, flow: str) -> DeadLetter:
    [letter] = await queue.dead_letters(flow)
    return letter


# -- taking an item out of circulation ----------------------------------------


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


# -- ids and reading one -------------------------------------------------------


async def test_ids_are_unique_url_safe_and_the_same_from_every_call_and_handle(
    queue_backend: QueueBackend,
) -> None:
    queue, other = queue_backend.open(), queue_backend.open()
    for n, stream in enumerate([A, B, C, SLASHED, A, C]):
        await dead(queue, stream, n)

    letters = await queue.dead_letters()

    letter_ids = [d.id for d in letters]
    assert len(set(letter_ids)) == 6
    assert all(re.fullmatch(r"[0-9-]+", i) for i in letter_ids)  # no flow, no "/"
    assert [d.id for d in await queue.dead_letters()] == letter_ids
    assert [d.id for d in await other.dead_letters()] == letter_ids
    for flow in ("f1", "f2", "cams/desk"):
        assert [d.id for d in await other.dead_letters(flow)] == [
            d.id for d in letters if d.flow == flow
        ]


async def test_a_dead_letter_shows_what_an_operator_needs(queue: WorkQueue) -> None:
    [item] = await queue.commit([NewItem(SLASHED, "emission", PAYLOAD)], claim_for="c")
    await queue.release([item.entry_id])
    [item] = await queue.claim("c", {SLASHED: 1})

    await queue.dead_letter(item, "failed 2 times: ValueError")

    letter = await only_letter(queue, "cams/desk")
    assert (letter.flow, letter.node, letter.deliveries) == ("cams/desk", "a", 2)
    assert letter.reason == "failed 2 times: ValueError"
    assert letter.item == item
    assert letter.dead_at >= item.enqueued_at
    assert await queue.dead_letter_of("cams/desk", letter.id) == letter


async def test_ids_are_not_reused_after_a_delete_or_a_reopen(
    queue_backend: QueueBackend,
) -> None:
    queue = queue_backend.open()
    await dead(queue, A, 0)
    first = await only_letter(queue, "f1")
    assert await queue.delete_dead_letter("f1", first.id)
    await dead(queue, A, 1)
    second = await only_letter(queue, "f1")
    await queue.close()

    reopened = queue_backend.open()
    await dead(reopened, A, 2)

    assert second.id != first.id
    assert await reopened.dead_letter_of("f1", second.id) == second
    assert len({first.id, second.id, *[d.id for d in await reopened.dead_letters()]}) == 3


async def test_dead_letter_of_another_flow_or_an_unknown_id_is_none(queue: WorkQueue) -> None:
    await dead(queue, A, 0)
    await dead(queue, C, 1)
    letter = await only_letter(queue, "f1")

    assert await queue.dead_letter_of("f2", letter.id) is None
    assert await queue.dead_letter_of("f1/a", letter.id) is None
    assert await queue.dead_letter_of("never-seen", letter.id) is None
    assert await queue.delete_dead_letter("f1", letter.id)
    assert await queue.dead_letter_of("f1", letter.id) is None


@pytest.mark.parametrize("dead_id", MALFORMED)
async def test_a_malformed_id_is_simply_not_found(queue: WorkQueue, dead_id: str) -> None:
    await dead(queue, A, 0)
    before = await queue.dead_letters()

    assert await queue.dead_letter_of("f1", dead_id) is None
    assert await queue.requeue_dead_letter("f1", dead_id) is None
    assert await queue.delete_dead_letter("f1", dead_id) is False

    assert await queue.dead_letters() == before
    assert await queue.backlog() == {}


async def test_the_other_backends_ids_are_not_found(queue: WorkQueue) -> None:
    await dead(queue, A, 0)
    letter = await only_letter(queue, "f1")
    # An SQLite id is a Redis one's first number and the other way round.
    foreign = f"{letter.id}-1712345678901-0" if "-" not in letter.id else letter.id.split("-")[0]

    assert await queue.dead_letter_of("f1", foreign) is None
    assert await queue.requeue_dead_letter("f1", foreign) is None
    assert await queue.delete_dead_letter("f1", foreign) is False
    assert await queue.dead_letters() == [letter]


# -- requeue -------------------------------------------------------------------


@pytest.mark.parametrize("deliveries", [1, 3])
async def test_a_requeued_item_runs_again_as_a_redelivery(
    queue: WorkQueue, deliveries: int
) -> None:
    [item] = await queue.commit([NewItem(A, "emission", PAYLOAD)], claim_for="c")
    for _ in range(deliveries - 1):
        await queue.release([item.entry_id])
        [item] = await queue.claim("c", {A: 1})
    await queue.dead_letter(item, "poison")
    letter = await only_letter(queue, "f1")

    requeued = await queue.requeue_dead_letter("f1", letter.id)

    assert requeued is not None
    assert (requeued.stream, requeued.kind, requeued.payload) == (A, "emission", PAYLOAD)
    assert requeued.deliveries == deliveries  # as stored: ready, the attempts so far
    assert requeued.entry_id != item.entry_id
    assert requeued.seq > item.seq
    assert requeued.enqueued_at >= letter.dead_at
    assert await queue.dead_letters() == []
    assert await queue.dead_letter_of("f1", letter.id) is None
    backlog = await queue.backlog()
    assert (backlog[A].ready, backlog[A].pending) == (1, 0)

    [again] = await queue.claim("d", {A: 5})

    assert again.entry_id == requeued.entry_id
    assert again.seq == requeued.seq
    assert again.payload == PAYLOAD
    assert again.deliveries == deliveries + 1
    assert again.redelivery
    assert await queue.ack([again.entry_id]) == 1
    assert await queue.backlog() == {}


async def test_an_item_never_delivered_before_it_died_is_not_a_redelivery(
    queue: WorkQueue,
) -> None:
    [item] = await fill(queue, A, 1)
    await queue.dead_letter(item, "refused at the door")
    letter = await only_letter(queue, "f1")

    requeued = await queue.requeue_dead_letter("f1", letter.id)

    assert requeued is not None and requeued.deliveries == 0
    [again] = await queue.claim("c", {A: 1})
    assert (again.deliveries, again.redelivery) == (1, False)


async def test_a_requeued_item_goes_behind_the_items_waiting_in_its_stream(
    queue: WorkQueue,
) -> None:
    await fill(queue, A, 4)  # n 0..3
    [zero] = await queue.claim("c", {A: 1})
    await queue.dead_letter(zero, "poison")
    [one] = await queue.claim("c", {A: 1})
    await queue.release([one.entry_id])  # handed back: ready, delivered once
    # 2 and 3 were never delivered.

    requeued = await queue.requeue_dead_letter("f1", (await only_letter(queue, "f1")).id)
    # Not even an enqueue that could claim at once overtakes it.
    [four] = await queue.commit([new(A, 4)], claim_for="c")

    assert requeued is not None
    assert four.deliveries == 0
    assert four.seq > requeued.seq
    claimed = await queue.claim("c", {A: 10})
    assert ns(claimed) == [1, 2, 3, 0, 4]
    assert [i.deliveries for i in claimed] == [2, 1, 1, 2, 1]
    assert ids(claimed)[3] == requeued.entry_id


async def test_requeue_of_another_flows_or_an_unknown_dead_letter_changes_nothing(
    queue: WorkQueue,
) -> None:
    await dead(queue, A, 0)
    await dead(queue, C, 1)
    [letter_c, letter_a] = await queue.dead_letters()
    stats = await queue.stats()

    assert await queue.requeue_dead_letter("f2", letter_a.id) is None
    assert await queue.requeue_dead_letter("f1", letter_c.id) is None
    assert await queue.delete_dead_letter("f2", letter_a.id) is False
    assert await queue.requeue_dead_letter("f1", letter_a.id) is not None
    assert await queue.requeue_dead_letter("f1", letter_a.id) is None  # gone now
    assert await queue.delete_dead_letter("f1", letter_a.id) is False

    assert await queue.dead_letters() == [letter_c]
    assert ns(await queue.claim("c", {A: 5, C: 5})) == [0]
    after = await queue.stats()
    assert after.extra["requeued"] == stats.extra["requeued"] + 1


async def test_two_handles_requeueing_one_dead_letter_requeue_it_once(
    queue_backend: QueueBackend,
) -> None:
    first, second = queue_backend.open(), queue_backend.open()
    await dead(first, A, 0)
    letter = await only_letter(first, "f1")

    results = await asyncio.gather(
        first.requeue_dead_letter("f1", letter.id), second.requeue_dead_letter("f1", letter.id)
    )

    assert sum(r is not None for r in results) == 1
    assert ns(await first.claim("c", {A: 5})) == [0]


async def test_a_requeued_item_of_a_parked_flow_waits_for_it_to_be_unparked(
    queue: WorkQueue,
) -> None:
    await dead(queue, A, 0)
    await queue.park("f1")

    requeued = await queue.requeue_dead_letter("f1", (await only_letter(queue, "f1")).id)

    assert requeued is not None
    assert await queue.claim("c", {A: 5}) == []
    assert await queue.parked() == {"f1": None}
    assert (await queue.backlog())[A].ready == 1
    await queue.unpark("f1", steps=1)
    [again] = await queue.claim("c", {A: 5})
    assert (again.entry_id, again.deliveries) == (requeued.entry_id, 2)
    assert await queue.parked() == {"f1": None}


async def test_requeue_counts_an_enqueue_and_a_requeue_not_one_less_dead_letter(
    queue: WorkQueue,
) -> None:
    await fill(queue, B, 1)
    await dead(queue, A, 0)
    before = await queue.stats()
    assert before.extra["requeued"] == 0

    await queue.requeue_dead_letter("f1", (await only_letter(queue, "f1")).id)
    await queue.claim("c", {A: 1})  # a redelivery

    after = await queue.stats()
    assert after.enqueued == before.enqueued + 1
    assert after.dead_lettered == before.dead_lettered == 1
    assert after.backlog == before.backlog + 1
    assert after.redelivered == before.redelivered + 1
    assert after.extra["requeued"] == 1
    # Every item ever enqueued is acked, dead (counted once) or waiting: the
    # requeue both took one back from the dead and enqueued it.
    assert after.enqueued == after.acked + after.dead_lettered + after.backlog


# -- delete --------------------------------------------------------------------


async def test_a_deleted_dead_letter_is_gone_and_the_others_stay(queue: WorkQueue) -> None:
    for n in range(3):
        await dead(queue, A, n)
    newest, middle, oldest = await queue.dead_letters("f1")

    assert await queue.delete_dead_letter("f1", middle.id) is True

    assert await queue.dead_letters("f1") == [newest, oldest]
    assert await queue.dead_letter_of("f1", middle.id) is None
    assert await queue.delete_dead_letter("f1", middle.id) is False
    assert await queue.requeue_dead_letter("f1", middle.id) is None
    stats = await queue.stats()
    assert (stats.dead_lettered, stats.backlog, stats.extra["requeued"]) == (3, 0, 0)


# -- garbage collection --------------------------------------------------------


def ref_item(stream: StreamKey, name: str) -> NewItem:
    ref = {"digest": digest(name), "media_type": "image/jpeg", "size": 1, "meta": {}}
    return NewItem(stream, "emission", {"value": {"$ref": ref}})


async def test_live_digests_see_the_reference_in_the_dead_letter_then_in_the_item(
    queue: WorkQueue,
) -> None:
    [item] = await queue.commit([ref_item(A, "frame")], claim_for="c")
    await queue.dead_letter(item, "poison")
    assert await live(queue) == {digest("frame")}

    await queue.requeue_dead_letter("f1", (await only_letter(queue, "f1")).id)

    assert await live(queue) == {digest("frame")}
    [again] = await queue.claim("c", {A: 1})
    await queue.ack([again.entry_id])
    assert await live(queue) == set()


async def test_a_requeue_during_a_read_never_hides_the_reference(
    queue_backend: QueueBackend,
) -> None:
    """Another handle requeues a dead letter while live_digests is half-way: once
    the read has passed the item's stream (and, with Redis, not yet reached the
    dead letters, read last), the reference is still reported."""
    queue, operator = queue_backend.open(), queue_backend.open()
    await queue.commit([ref_item(A, "filler1"), ref_item(A, "filler2")])
    [item] = await queue.commit([ref_item(B, "requeued")], claim_for="c")
    await queue.dead_letter(item, "poison")
    await queue.put_latest(
        {("f1", "cam", "image"): digest("latest1"), ("f1", "mic", "x"): digest("latest2")}
    )
    letter = await only_letter(queue, "f1")

    found: set[str] = set()
    requeued: WorkItem | None = None
    async for digests in queue.live_digests(batch=1):
        found.update(digests)
        at_latest = {digest("latest1"), digest("latest2")} & set(digests)
        if at_latest and requeued is None:
            requeued = await operator.requeue_dead_letter("f1", letter.id)

    assert requeued is not None
    assert digest("requeued") in found
    assert await queue.dead_letters() == []
    assert await live(queue) == {digest(n) for n in ("filler1", "filler2", "requeued")} | {
        digest("latest1"),
        digest("latest2"),
    }


# -- SQLite specifics ------------------------------------------------------------


@pytest.mark.parametrize("queue_backend", ["sqlite"], indirect=True)
async def test_sqlite_a_file_from_before_requeues_were_counted_gains_the_counter(
    queue_backend: QueueBackend,
) -> None:

    from mediaflow.queue import SqliteQueue

    queue = queue_backend.open()
    assert isinstance(queue, SqliteQueue)
    await dead(queue, A, 0)
    await queue.close()
    with sqlite3.connect(queue.path) as conn:  # schema 3 had no tallies table
        conn.execute("DROP TABLE tallies")
        conn.execute("PRAGMA user_version = 3")
    conn.close()

    reopened = queue_backend.open()
    assert (await reopened.stats()).extra["requeued"] == 0
    letter = await only_letter(reopened, "f1")
    assert await reopened.requeue_dead_letter("f1", letter.id) is not None
    assert (await reopened.stats()).extra["requeued"] == 1
