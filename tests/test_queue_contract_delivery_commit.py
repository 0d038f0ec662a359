"""The work-queue contract of group commits (``WorkQueue.commit``) and of acks by
batch, run against every backend in ``QUEUE_BACKENDS`` like
``tests/test_queue_contract_delivery.py`` (same fixtures: ``queue``, ``queue_backend``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import pytest

from mediaflow.queue import Delivery, EmissionRun, NewItem, StreamKey, WorkItem, WorkQueue
from tests.conftest import QueueBackend

ROLE = Delivery
"""The role of the queue this module holds the contract of (see
``tests/test_queue_contract_roles.py``)."""

A = StreamKey("f1", "a")
B = StreamKey("f1", "b")
C = StreamKey("f2", "c")

AT = 1_700_000_000.1234567  # more digits than SQLite's 15 when it prints a float


def run(stream: StreamKey, *ns: int, claim: int = 0, at: float = AT) -> EmissionRun:
    return EmissionRun(stream, "up.out", "in", [{"n": n} for n in ns], at, claim)


def new(stream: StreamKey, n: int, **options: Any) -> NewItem:
    return NewItem(stream, "emission", {"n": n}, **options)


def ns(items: Sequence[WorkItem]) -> list[int]:
    """The ``n`` of each item, whether enqueued (``{"n": n}``) or committed."""
    return [i.payload["value"]["n"] if "value" in i.payload else i.payload["n"] for i in items]


def ids(items: Sequence[WorkItem]) -> list[str]:
    return [item.entry_id for item in items]


async def fill(queue: WorkQueue, stream: StreamKey, count: int, start: int = 0) -> list[WorkItem]:
    return await queue.commit([new(stream, start + i) for i in range(count)])


# -- order and seq -------------------------------------------------------------


async def test_commit_appends_runs_in_order_with_enqueue_in_between(queue: WorkQueue) -> None:
    await fill(queue, A, 1, start=0)
    assert await queue.commit([run(A, 1, 2), run(B, 10), run(A, 3)]) == []
    await fill(queue, A, 1, start=4)
    assert await queue.commit([run(A, 5), run(B, 11, 12)]) == []

    a = await queue.claim("c", {A: 10})
    b = await queue.claim("c", {B: 10})

    assert [(i.seq, n) for i, n in zip(a, ns(a), strict=True)] == [(s, s - 1) for s in range(1, 7)]
    assert [(i.seq, n) for i, n in zip(b, ns(b), strict=True)] == [(1, 10), (2, 11), (3, 12)]
    assert {(i.kind, i.deliveries) for i in a + b} == {("emission", 1)}
    assert (await queue.stats()).enqueued == 9


async def test_empty_commits(queue: WorkQueue) -> None:
    assert await queue.commit([]) == []
    assert await queue.commit([run(A), run(B)], claim_for="me") == []  # runs without values
    stats = await queue.stats()
    assert (stats.enqueued, stats.acked) == (0, 0)
    assert await queue.claim("c", {A: 5, B: 5}) == []


# -- claiming at once ----------------------------------------------------------


@pytest.mark.parametrize(
    ("runs", "claimed", "left"),
    [
        ([run(A, 0, 1, 2, claim=3)], [0, 1, 2], []),
        ([run(A, 0, 1, 2, claim=2)], [0, 1], [2]),
        ([run(A, 0, 1, 2)], [], [0, 1, 2]),
        # Once one is left ready, later runs of the stream wait behind it ...
        ([run(A, 0, 1, claim=1), run(A, 2, claim=1)], [0], [1, 2]),
        ([run(A, 0, claim=1), run(A, 1, claim=1)], [0, 1], []),
        # ... and other streams do not.
        ([run(A, 0), run(B, 5, claim=1), run(A, 1, claim=1)], [5], [0, 1]),
    ],
)
async def test_commit_claims_the_first_values_of_each_run(
    queue: WorkQueue, runs: list[EmissionRun], claimed: list[int], left: list[int]
) -> None:
    got = await queue.commit(runs, claim_for="me")

    assert ns(got) == claimed
    assert all(i.deliveries == 1 and not i.redelivery for i in got)
    assert await queue.touch("me", ids(got)) == len(claimed)
    assert ns(await queue.claim("other", {A: 10, B: 10})) == left


async def test_commit_without_claim_for_claims_nothing(queue: WorkQueue) -> None:
    assert await queue.commit([run(A, 0, 1, claim=2)]) == []
    assert ns(await queue.claim("c", {A: 5})) == [0, 1]


@pytest.mark.parametrize(
    ("setup", "claimed"),
    [
        ("nothing", True),
        ("older ready", False),  # another handle's leftovers: not overtaken
        ("older released", False),  # handed back by its consumer: first in line again
        ("older pending", True),  # in flight already: order is kept
        ("flow parked", False),
        ("flow parked with steps", False),
        ("other flow parked", True),
    ],
)
async def test_commit_keeps_order_and_parking(
    queue_backend: QueueBackend, setup: str, claimed: bool
) -> None:
    queue, other = queue_backend.open(), queue_backend.open()
    if setup == "older ready":
        await fill(other, A, 1, start=-1)
    elif setup == "older released":
        [held] = await other.commit([new(A, -1)], claim_for="someone")
        await other.release([held.entry_id])
    elif setup == "older pending":
        await fill(other, A, 1, start=-1)
        await other.claim("someone", {A: 1})
    elif setup == "flow parked":
        await queue.park(A.flow)
    elif setup == "flow parked with steps":
        await queue.unpark(A.flow, steps=5)
    elif setup == "other flow parked":
        await queue.park(C.flow)

    got = await queue.commit([run(A, 0, 1, claim=2), run(B, 9, claim=1)], claim_for="me")

    expected = [0, 1] if claimed else []
    if "parked" not in setup or setup == "other flow parked":
        expected.append(9)  # B is not held up by A
    assert ns(got) == expected
    assert await queue.touch("me", ids(got)) == len(got)


async def test_parked_runs_wait_for_unpark(queue: WorkQueue) -> None:
    await queue.park(A.flow)
    assert await queue.commit([run(A, 0, 1, claim=2)], claim_for="me") == []
    assert await queue.claim("me", {A: 5}) == []

    await queue.unpark(A.flow)

    assert ns(await queue.claim("me", {A: 5})) == [0, 1]


@pytest.mark.parametrize("claim", [-1, 3])
async def test_commit_refuses_a_claim_outside_the_run(queue: WorkQueue, claim: int) -> None:
    with pytest.raises(ValueError, match="claim"):
        await queue.commit([run(A, 0), run(A, 1, 2, claim=claim)], claim_for="me")
    assert (await queue.stats()).enqueued == 0


# -- payloads ------------------------------------------------------------------

VALUES: list[Any] = [
    {"$ref": {"digest": "sha256:" + "ab" * 32, "media_type": "image/jpeg", "size": 3, "meta": {}}},
    {"nested": {"x": [1, 2.5, None, True, 1 / 3, 2**70]}, "s": 'é"\\\n\u2028'},
    [0.1, "two", [3]],
    "plain text",
    "ünïcödé ✓",
    "",
    1 / 3,
    0.1 + 0.2,
    1e-300,
    -0.0,
    2**62,
    -(2**63) + 1,
    2**63,
    -(2**70),
    0,
    True,
    False,
    None,
    {},
    [],
]


def emission_payload(value: Any, at: float = AT) -> dict[str, Any]:
    return {"src": "up.out", "port": "in", "value": value, "at": at}


async def test_committed_payloads_are_what_enqueue_would_store(queue: WorkQueue) -> None:
    at = time.time() + 1e-7  # any float, exact to the last bit
    await queue.commit([EmissionRun(A, "up.out", "in", VALUES, at)])
    await queue.commit([NewItem(B, "emission", emission_payload(v, at)) for v in VALUES])

    committed = await queue.claim("c", {A: 100})
    enqueued = await queue.claim("c", {B: 100})

    assert [i.payload for i in committed] == [i.payload for i in enqueued]
    assert [i.payload for i in committed] == [emission_payload(v, at) for v in VALUES]
    assert all(i.payload["at"] == at for i in committed)
    # bool stays bool, float stays float: equality alone would not tell.
    assert [type(i.payload["value"]) for i in committed] == [type(v) for v in VALUES]


async def test_committed_nan_and_infinity_are_stored_as_enqueue_stores_them(
    queue: WorkQueue,
) -> None:
    values = [math.nan, math.inf, -math.inf, {"rms": math.nan}, 1.5]
    await queue.commit([EmissionRun(A, "up.out", "in", values, AT)])

    got = [i.payload["value"] for i in await queue.claim("c", {A: 10})]

    assert math.isnan(got[0]) and got[1:3] == [math.inf, -math.inf]
    assert math.isnan(got[3]["rms"]) and got[4] == 1.5


async def test_claimed_items_are_those_a_later_claim_would_return(queue: WorkQueue) -> None:
    claimed = await queue.commit(
        [EmissionRun(A, "up.out", "in", VALUES, AT, claim=len(VALUES) - 3)], claim_for="me"
    )
    assert await queue.release(ids(claimed), started=False) == len(claimed)

    again = await queue.claim("me", {A: 100})

    assert again[: len(claimed)] == claimed  # entry_id, seq, payload, deliveries, enqueued_at
    assert [i.payload for i in again] == [emission_payload(v) for v in VALUES]
    assert [i.seq for i in again] == list(range(1, len(VALUES) + 1))
    assert {(i.stream, i.kind, i.deliveries, i.enqueued_at) for i in again} == {
        (A, "emission", 1, claimed[0].enqueued_at)
    }


async def test_commit_refuses_a_value_that_is_not_json_and_writes_nothing(
    queue: WorkQueue,
) -> None:

    await fill(queue, A, 2)
    held = await queue.claim("c", {A: 2})
    bad = EmissionRun(B, "up.out", "in", [{"ok": 1}, {"bad": object()}], AT, claim=2)

    with pytest.raises((TypeError, ValueError)):
        await queue.commit(
            [run(C, 0, claim=1), bad],
            claim_for="me",
            ack=ids(held),
            latest={("f1", "up", "out"): {"n": 1}},
        )

    assert await queue.touch("c", ids(held)) == 2  # not acked
    assert await queue.latest("f1") == {}
    stats = await queue.stats()
    assert (stats.enqueued, stats.acked) == (2, 0)
    assert await queue.claim("c", {B: 5, C: 5}) == []


# -- acks and latest values in the same transaction ----------------------------


async def test_commit_acks_and_records_latest_values_with_the_runs(queue: WorkQueue) -> None:
    await fill(queue, A, 3)
    done = await queue.claim("c", {A: 3})

    got = await queue.commit(
        [run(B, 7, claim=1)],
        claim_for="c",
        ack=[*ids(done[:2]), "not-an-id"],
        latest={("f1", "b", "out"): {"n": 7}},
    )

    assert ns(got) == [7]
    assert await queue.touch("c", ids(done)) == 1  # the third is still held
    assert await queue.latest("f1") == {("b", "out"): {"n": 7}}
    assert (await queue.stats()).acked == 2


async def test_commit_of_acks_or_latest_values_alone(queue: WorkQueue) -> None:
    await fill(queue, A, 2)
    done = await queue.claim("c", {A: 2})

    assert await queue.commit([], ack=ids(done[:1])) == []
    assert await queue.commit([], latest={("f1", "a", "out"): 1}) == []
    assert await queue.commit([], ack=ids(done[1:]), latest={("f1", "a", "out"): 2}) == []

    assert (await queue.stats()).acked == 2
    assert await queue.latest("f1") == {("a", "out"): 2}
    assert sum(b.total for b in (await queue.backlog()).values()) == 0


async def test_ack_of_a_batch_counts_only_pending_items(queue: WorkQueue) -> None:
    """Acks of consecutive items, with ready, unknown and repeated ids among
    them, across streams: exactly the pending ones go."""
    a = await fill(queue, A, 6)
    b = await fill(queue, B, 2)
    held = await queue.claim("c", {A: 4, B: 2})  # A 1-4 pending, 5-6 ready
    await queue.ack([a[1].entry_id])  # a gap in the middle of the batch

    batch = [*ids(a), *ids(b), a[0].entry_id, "x", "0", str(1 << 63)]
    assert await queue.ack(batch) == 5

    assert await queue.touch("c", ids(held)) == 0
    assert ns(await queue.claim("c", {A: 5, B: 5})) == [4, 5]  # the ready ones stayed
    stats = await queue.stats()
    assert (stats.acked, stats.backlog) == (6, 2)
    # Seqs are never handed out again, whatever the batch deleted.
    assert [i.seq for i in await fill(queue, A, 1)] == [7]
    assert [i.seq for i in await fill(queue, B, 1)] == [3]


async def test_seqs_continue_after_a_commit_acks_everything(queue: WorkQueue) -> None:
    got = await queue.commit([run(A, 0, 1, claim=2)], claim_for="c")
    more = await queue.commit([run(A, 2, claim=1)], claim_for="c", ack=ids(got))
    await queue.commit([], ack=ids(more))

    after = await queue.commit([run(A, 3, claim=1)], claim_for="c")

    assert [i.seq for i in after] == [4]
    assert (await queue.stats()).acked == 3
