"""The queue contract's storage-lifecycle operations (the Retention role), run
against every backend in ``QUEUE_BACKENDS``: the digests the queue still
references, read from one snapshot; trimming dead letters; forgetting a flow."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncGenerator
from typing import Any, cast

import pytest

from mediaflow.queue import (
    EmissionRun,
    NewItem,
    QueueError,
    Retention,
    StreamKey,
    WorkItem,
    WorkQueue,
)
from mediaflow.queue.sqlite import TRIM_CHUNK
from tests.conftest import QueueBackend
from tests.queue_sqlite_helpers import let_checkpoint_finish

ROLE = Retention
"""The role of the queue this module holds the contract of (see
``tests/test_queue_contract_roles.py``)."""

A = StreamKey("f1", "a")
B = StreamKey("f1", "b")
C = StreamKey("f1", "c")
OTHER = StreamKey("f2", "x")


def digest(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def ref_payload(name: str, **extra: Any) -> dict[str, Any]:
    """An emission payload carrying a reference, as the runner journals one."""
    ref = {"digest": digest(name), "media_type": "image/jpeg", "size": 1, "meta": {}}
    return {"src": "cam.image", "port": "image", "value": {"$ref": ref}, "at": 0.0, **extra}


def emission(stream: StreamKey, name: str, **options: Any) -> NewItem:
    return NewItem(stream, "emission", ref_payload(name), **options)


def emission_run(stream: StreamKey, *names: str, claim: int = 0) -> EmissionRun:
    """Emissions carrying references, as the runner commits them (see ``ref_payload``)."""
    values = [ref_payload(name)["value"] for name in names]
    return EmissionRun(stream, "cam.image", "image", values, 0.0, claim)


async def live(queue: WorkQueue, batch: int = 1000) -> set[str]:
    found: set[str] = set()
    async for digests in queue.live_digests(batch=batch):
        assert all(d.startswith("sha256:") and len(d) == 71 for d in digests)
        assert len(set(digests)) == len(digests)
        found.update(digests)
    return found


async def dead(queue: WorkQueue, stream: StreamKey, names: list[str]) -> list[WorkItem]:
    stored = await queue.commit([emission(stream, n) for n in names], claim_for="c")
    for item in stored:
        await queue.dead_letter(item, f"failed on {item.payload['value']['$ref']['digest']}")
    return stored


# -- live digests --------------------------------------------------------------


async def test_an_empty_queue_holds_no_digests(queue: WorkQueue) -> None:
    assert await live(queue) == set()


async def test_live_digests_cover_every_state_dead_letters_and_latest(
    queue: WorkQueue,
) -> None:
    await queue.commit([emission(A, "ready")])
    await queue.commit([emission(B, "pending")], claim_for="c")
    await queue.park("f2")
    await queue.commit([emission(OTHER, "parked")], claim_for="c")
    await dead(queue, C, ["dead"])
    await queue.put_latest({("f1", "cam", "image"): {"$ref": {"digest": digest("latest")}}})
    # Anywhere in the JSON, however nested, and several in one value.
    nested = {"clips": [{"a": digest("nested1")}, {"b": [digest("nested2")]}]}
    await queue.commit([NewItem(A, "emission", {"value": nested})])
    # Not digests: wrong case, too short, another algorithm.
    await queue.commit(
        [
            NewItem(A, "emission", {"x": digest("upper").upper()}),
            NewItem(A, "emission", {"x": digest("short")[:60]}),
            NewItem(A, "emission", {"x": "md5:" + "0" * 64}),
        ]
    )

    found = await live(queue, batch=2)

    names = ["ready", "pending", "parked", "dead", "latest", "nested1", "nested2"]
    assert found == {digest(n) for n in names}


async def test_live_digests_cover_committed_values(queue: WorkQueue) -> None:
    await queue.park("f2")
    await queue.commit(
        [
            emission_run(A, "ready1", "ready2"),
            emission_run(B, "pending", "left", claim=1),
            emission_run(OTHER, "parked", claim=1),
        ],
        claim_for="c",
        latest={("f1", "cam", "image"): {"$ref": {"digest": digest("latest")}}},
    )
    nested = {"clips": [{"a": digest("nested1")}, {"b": [digest("nested2")]}]}
    await queue.commit([EmissionRun(C, "x.y", "in", [nested, digest("bare")], 0.0)])

    found = await live(queue, batch=2)

    names = ["ready1", "ready2", "pending", "left", "parked", "latest", "nested1", "nested2"]
    assert found == {digest(n) for n in [*names, "bare"]}


async def test_acked_items_no_longer_hold_their_digests(queue: WorkQueue) -> None:
    [kept] = await queue.commit([emission(A, "kept")], claim_for="c")
    [done] = await queue.commit([emission(B, "done")], claim_for="c")
    await queue.ack([done.entry_id])

    assert await live(queue) == {digest("kept")}

    # Acked by the commit that emits the next reference, then by a commit of acks.
    [moved] = await queue.commit(
        [emission_run(C, "moved", claim=1)], claim_for="c", ack=[kept.entry_id]
    )
    assert await live(queue) == {digest("moved")}
    await queue.commit([], ack=[moved.entry_id])
    assert await live(queue) == set()


@pytest.mark.parametrize("batch", [1, 3, 1000])
async def test_each_list_is_one_page_of_distinct_digests(queue: WorkQueue, batch: int) -> None:
    # 10 items, 5 distinct references (each sent twice).
    await queue.commit([emission(A, f"r{i % 5}") for i in range(10)])

    lists = [digests async for digests in queue.live_digests(batch=batch)]

    assert all(len(d) <= batch for d in lists)
    assert {d for digests in lists for d in digests} == {digest(f"r{i}") for i in range(5)}
    if batch == 1000:
        assert len(lists) == 1  # deduplicated within a page


@pytest.mark.parametrize("via", ["item", "run"])
async def test_a_forward_during_the_read_never_hides_the_reference(
    queue_backend: QueueBackend, via: str
) -> None:
    """A node forwards a reference (enqueues its output and acks its input in one
    transaction, committing a single item or a run) from another handle while
    live_digests is half-way: the reference is reported, from its old place or
    its new one."""
    queue, node = queue_backend.open(), queue_backend.open()
    # Three streams created in this order, the forwarded reference in the last;
    # its new place is the first stream, which the read has already passed.
    await queue.commit([emission(A, "filler-a")])
    await queue.commit([emission(B, "filler-b")])
    [held] = await queue.commit([emission(C, "forwarded")], claim_for="node")
    before = await live(queue)
    assert digest("forwarded") in before

    found: set[str] = set()
    pages = 0
    async for digests in queue.live_digests(batch=1):
        found.update(digests)
        pages += 1
        if pages == 2:
            if via == "item":
                stored = await node.commit([emission(A, "forwarded")], ack=[held.entry_id])
                assert len(stored) == 1
            else:
                run = emission_run(A, "forwarded", claim=1)
                claimed = await node.commit([run], claim_for="next", ack=[held.entry_id])
                assert claimed == []  # A's filler is older and ready: not overtaken
    assert digest("forwarded") in found
    # The forward did land: a fresh read finds the reference in its new place only.
    assert await live(queue) == before


async def test_a_read_closed_early_ends_its_snapshot(queue_backend: QueueBackend) -> None:
    queue, other = queue_backend.open(), queue_backend.open()
    await queue.commit([emission(A, f"r{i}") for i in range(5)])
    reader = cast(AsyncGenerator[list[str], None], queue.live_digests(batch=1))
    first = await anext(reader)
    await reader.aclose()

    assert len(first) == 1
    # Writes go on, and a new read sees them.
    await other.commit([emission(B, "later")])
    assert digest("later") in await live(queue)


# -- dead letters --------------------------------------------------------------


async def test_trim_dead_letters_by_age(queue: WorkQueue) -> None:
    await dead(queue, A, ["old1", "old2"])
    cutoff = time.time()
    time.sleep(0.01)
    await dead(queue, A, ["new"])

    assert await queue.trim_dead_letters(before=cutoff, keep_per_flow=100) == 2

    letters = await queue.dead_letters()
    assert [d.item.payload["value"]["$ref"]["digest"] for d in letters] == [digest("new")]
    assert await live(queue) == {digest("new")}


@pytest.mark.parametrize(("keep", "left"), [(0, 0), (2, 2), (5, 5), (9, 5)])
async def test_trim_dead_letters_keeps_the_newest_per_flow(
    queue: WorkQueue, keep: int, left: int
) -> None:
    await dead(queue, A, [f"a{i}" for i in range(5)])
    await dead(queue, OTHER, [f"x{i}" for i in range(5)])

    trimmed = await queue.trim_dead_letters(before=0.0, keep_per_flow=keep)

    assert trimmed == 2 * (5 - left)
    for flow, prefix in (("f1", "a"), ("f2", "x")):
        letters = await queue.dead_letters(flow)
        kept = [d.item.payload["value"]["$ref"]["digest"] for d in letters]
        assert kept == [digest(f"{prefix}{i}") for i in reversed(range(5 - left, 5))]


async def test_trim_dead_letters_leaves_items_and_latest_alone(queue: WorkQueue) -> None:
    await queue.commit([emission(A, "waiting")])
    await queue.put_latest({("f1", "cam", "image"): digest("latest")})
    await dead(queue, B, ["dead"])

    assert await queue.trim_dead_letters(before=time.time() + 1, keep_per_flow=0) == 1

    assert await live(queue) == {digest("waiting"), digest("latest")}


# -- forgetting a flow ---------------------------------------------------------


async def test_forget_flow_drops_its_latest_values_and_dead_letters(queue: WorkQueue) -> None:
    await queue.put_latest(
        {
            ("f1", "cam", "image"): digest("f1-latest"),
            ("f1", "mic", "audio"): 1,
            ("f2", "cam", "image"): digest("f2-latest"),
        }
    )
    await dead(queue, A, ["f1-dead1", "f1-dead2"])
    await dead(queue, OTHER, ["f2-dead"])

    assert await queue.forget_flow("f1") == {"latest": 2, "dead_letters": 2}

    assert await queue.latest("f1") == {}
    assert await queue.dead_letters("f1") == []
    assert await live(queue) == {digest("f2-latest"), digest("f2-dead")}
    assert await queue.forget_flow("f1") == {"latest": 0, "dead_letters": 0}
    assert await queue.forget_flow("never-seen") == {"latest": 0, "dead_letters": 0}


@pytest.mark.parametrize("state", ["ready", "pending", "parked"])
async def test_forget_flow_refuses_while_items_wait(queue: WorkQueue, state: str) -> None:
    await queue.put_latest({("f1", "cam", "image"): digest("latest")})
    if state == "parked":
        await queue.park("f1")
    await queue.commit(
        [emission(A, "waiting")],
        claim_for="c" if state in ("pending", "parked") else None,
    )

    with pytest.raises(QueueError, match=r"flow 'f1' still has 1 item\(s\) waiting"):
        await queue.forget_flow("f1")

    assert await queue.latest("f1") == {("cam", "image"): digest("latest")}
    # Its items are no obstacle to forgetting another flow.
    await queue.put_latest({("f2", "cam", "image"): digest("f2-latest")})
    assert await queue.forget_flow("f2") == {"latest": 1, "dead_letters": 0}


async def test_forget_flow_after_its_items_are_acked(queue: WorkQueue) -> None:
    [item] = await queue.commit([emission(A, "done")], claim_for="c")
    await queue.ack([item.entry_id])
    await queue.put_latest({("f1", "cam", "image"): digest("done")})

    assert await queue.forget_flow("f1") == {"latest": 1, "dead_letters": 0}
    assert await live(queue) == set()


# -- SQLite specifics ------------------------------------------------------------


@pytest.mark.parametrize("queue_backend", ["sqlite"], indirect=True)
async def test_sqlite_trims_a_large_backlog_in_short_transactions(queue: WorkQueue) -> None:
    count = TRIM_CHUNK * 2 + 10
    for start in range(0, count, 500):
        stored = await queue.commit(
            [emission(A, f"d{i}") for i in range(start, min(start + 500, count))], claim_for="c"
        )
        for item in stored:
            await queue.dead_letter(item, "x")

    assert await queue.trim_dead_letters(before=0.0, keep_per_flow=3) == count - 3

    assert len(await queue.dead_letters("f1", limit=10)) == 3


@pytest.mark.parametrize("queue_backend", ["sqlite"], indirect=True)
async def test_sqlite_a_closed_queue_refuses_live_digests(queue: WorkQueue) -> None:
    await queue.close()
    with pytest.raises(QueueError, match="closed"):
        await live(queue)


@pytest.mark.parametrize("queue_backend", ["sqlite"], indirect=True)
async def test_sqlite_trim_refuses_a_negative_keep(queue: WorkQueue) -> None:
    with pytest.raises(ValueError, match="keep_per_flow"):
        await queue.trim_dead_letters(before=0.0, keep_per_flow=-1)


@pytest.mark.parametrize("queue_backend", ["sqlite"], indirect=True)
async def test_sqlite_checkpoints_do_not_wait_for_an_open_snapshot(
    queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RESTART checkpoint would wait for the sweep's read (holding this handle's
    writers off meanwhile): while one is open only PASSIVE checkpoints run, and the
    WAL starts over once it ends."""
    from mediaflow.queue import SqliteQueue
    from mediaflow.queue.sqlite.db import CHECKPOINT_EVERY, SqliteDb

    assert isinstance(queue, SqliteQueue)
    modes: list[tuple[str, bool]] = []
    real = SqliteDb._checkpoint

    def checkpoint(self: SqliteDb, mode: Any) -> None:
        modes.append((mode, self.snapshot_reads > 0))
        real(self, mode)

    monkeypatch.setattr(SqliteDb, "_checkpoint", checkpoint)

    async def churn(n: int) -> None:
        for i in range(n):
            [item] = await queue.commit([emission(B, f"c{i}")], claim_for="c")
            await queue.ack([item.entry_id])
            await let_checkpoint_finish(queue)

    await queue.commit([emission(A, f"r{i}") for i in range(3)])
    reader = cast(AsyncGenerator[list[str], None], queue.live_digests(batch=1))
    await anext(reader)
    await churn(CHECKPOINT_EVERY * 3)
    await reader.aclose()
    assert ("PASSIVE", True) in modes
    assert ("RESTART", True) not in modes
    await churn(CHECKPOINT_EVERY * 3)
    assert ("RESTART", False) in modes
