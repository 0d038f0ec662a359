"""The SQLite queue's own promises: several processes on one file, WAL, crash
recovery, waiting for another process's lock without blocking the loop, and
errors that name the file.

Child processes run this file as a script (see ``main`` at the bottom).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mediaflow.queue import (
    EmissionRun,
    NewItem,
    QueueError,
    QueueUnavailable,
    SqliteQueue,
    StreamKey,
    open_queue,
)

A = StreamKey("f", "a")
B = StreamKey("f", "b")
HERE = Path(__file__)


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def hold_write_lock(path: Path, seconds: float) -> threading.Event:
    """Hold the write lock from another connection for ``seconds``; returns once held."""
    held = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
        conn.close()

    threading.Thread(target=hold, daemon=True).start()
    held.wait()
    return held


class Ticker:
    """Counts how often the event loop got to run a 5 ms sleep."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0.005)
            self.ticks += 1

    def stop(self) -> int:
        self._task.cancel()
        return self.ticks


@pytest.fixture
async def queue(tmp_path: Path) -> AsyncIterator[SqliteQueue]:
    q = SqliteQueue(tmp_path / "queue.sqlite3")
    yield q
    await q.close()


# -- the file ------------------------------------------------------------------


async def test_file_is_in_wal_mode_with_normal_sync(queue: SqliteQueue) -> None:
    await queue.enqueue([NewItem(A, "emission", {})])
    conn = sqlite3.connect(queue.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert queue._db.connection.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


async def test_sync_full_on_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAFLOW_SQLITE_SYNC", "full")
    q = SqliteQueue(tmp_path / "queue.sqlite3")
    assert q._db.connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    await q.close()
    monkeypatch.setenv("MEDIAFLOW_SQLITE_SYNC", "sometimes")
    with pytest.raises(QueueError, match="MEDIAFLOW_SQLITE_SYNC"):
        SqliteQueue(tmp_path / "queue.sqlite3")


async def test_background_checkpoints_keep_the_wal_small(queue: SqliteQueue) -> None:
    for i in range(3000):
        [item] = await queue.enqueue([NewItem(A, "emission", {"i": i})], claim_for="c")
        await queue.ack([item.entry_id])
    await asyncio.sleep(0.2)  # let the last checkpoint finish

    wal = queue.path.with_name(queue.path.name + "-wal")
    # Without checkpoints: ~6000 commits of 2 KiB pages, over 20 MB. With them it
    # is ~4-6 MB on an idle machine; a loaded disk delays the fsyncs of the
    # background checkpoints (9.6 MB seen with two suites at once), hence the margin.
    assert wal.stat().st_size < 14_000_000


@pytest.mark.parametrize(
    ("setting", "where"),
    [
        (None, "data/queue.sqlite3"),
        ("", "data/queue.sqlite3"),
        ("sqlite", "data/queue.sqlite3"),
        ("sqlite://", "data/queue.sqlite3"),
        ("sqlite://elsewhere.db", "data/elsewhere.db"),
        ("sqlite:///ABS/q.db", "abs/q.db"),
        ("sqlite:///ABS", "abs/queue.sqlite3"),  # an existing directory
    ],
)
async def test_open_queue_settings(tmp_path: Path, setting: str | None, where: str) -> None:
    (tmp_path / "abs").mkdir()
    if setting is not None:
        setting = setting.replace("/ABS", str(tmp_path / "abs"))

    q = open_queue(setting, tmp_path / "data")

    assert isinstance(q, SqliteQueue)
    assert q.path == tmp_path / where
    await q.close()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("redis://localhost:6379/0", "'redis://localhost:6379/0' .*no Redis backend yet"),
        ("postgres://x", "'postgres://x' is not a queue .*expected 'sqlite'"),
        ("sqlite:/x", "'sqlite:/x' is not a queue"),
    ],
)
def test_open_queue_refuses(tmp_path: Path, setting: str, message: str) -> None:
    with pytest.raises(QueueError, match=f"MEDIAFLOW_QUEUE={message}"):
        open_queue(setting, tmp_path)


# -- errors --------------------------------------------------------------------


def test_a_corrupt_file_is_unavailable_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    path.write_bytes(b"this is not a database, just some bytes " * 100)

    with pytest.raises(QueueUnavailable, match=r"queue\.sqlite3.*not a database"):
        SqliteQueue(path)


def test_a_directory_in_the_way_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "queue.sqlite3").mkdir()
    with pytest.raises(QueueUnavailable, match=r"queue\.sqlite3"):
        SqliteQueue(tmp_path / "queue.sqlite3")


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(QueueUnavailable, match="schema 99 is newer"):
        SqliteQueue(path)


async def test_a_full_disk_is_unavailable_and_leaves_the_queue_intact(
    queue: SqliteQueue,
) -> None:
    await queue.enqueue([NewItem(A, "emission", {"n": 0})])
    pages = queue._db.connection.execute("PRAGMA page_count").fetchone()[0]
    queue._db.connection.execute(f"PRAGMA max_page_count = {pages}")  # the "disk" is full

    with pytest.raises(QueueUnavailable, match="disk full"):
        await queue.enqueue([NewItem(A, "emission", {"big": "x" * 100_000})])

    queue._db.connection.execute("PRAGMA max_page_count = 1073741823")
    [item] = await queue.enqueue([NewItem(A, "emission", {"n": 1})])
    assert item.seq == 2  # the failed enqueue left no trace


async def test_a_commit_on_a_full_disk_writes_nothing(queue: SqliteQueue) -> None:
    [held] = await queue.enqueue([NewItem(A, "emission", {"n": 0})], claim_for="c")
    pages = queue._db.connection.execute("PRAGMA page_count").fetchone()[0]
    queue._db.connection.execute(f"PRAGMA max_page_count = {pages}")

    big = EmissionRun(B, "up.out", "in", [{"big": "x" * 100_000}] * 3, 0.5, claim=3)
    with pytest.raises(QueueUnavailable, match="disk full"):
        await queue.commit(
            [big], claim_for="c", ack=[held.entry_id], latest={("f", "up", "out"): 1}
        )

    queue._db.connection.execute("PRAGMA max_page_count = 1073741823")
    assert await queue.touch("c", [held.entry_id]) == 1  # not acked
    assert await queue.latest("f") == {}
    [item] = await queue.commit([EmissionRun(B, "up.out", "in", [1], 0.5, claim=1)], claim_for="c")
    assert item.seq == 1  # the failed commit left no trace
    assert (await queue.stats()).acked == 0


async def test_committed_rows_are_the_rows_enqueue_writes(queue: SqliteQueue) -> None:
    """Column by column, bar the id: the same payload JSON (decoded), state, holder,
    deliveries and times as enqueue's rows for the same payloads and claims."""
    values: list[Any] = [{"n": 0}, 1 / 3, "text", True, None, [1.5, {"x": 2**70}]]
    at = time.time() + 1e-7
    await queue.commit([EmissionRun(A, "up.out", "in", values, at, claim=4)], claim_for="me")
    await queue.enqueue(
        [
            NewItem(
                B, "emission", {"src": "up.out", "port": "in", "value": v, "at": at}, claim=i < 4
            )
            for i, v in enumerate(values)
        ],
        claim_for="me",
    )

    conn = sqlite3.connect(queue.path)
    rows = conn.execute(
        "SELECT id, kind, payload, state, available_at, consumer, touched_at IS NULL, "
        "touched_at = enqueued_at, deliveries FROM items ORDER BY id"
    ).fetchall()
    conn.close()

    decoded = [(kind, json.loads(p), *rest) for _, kind, p, *rest in rows]
    committed, enqueued = decoded[: len(values)], decoded[len(values) :]
    assert committed == enqueued
    assert [row[1]["value"] for row in committed] == values
    assert {row[1]["at"] for row in committed} == {at}
    assert [row[2] for row in committed] == [1, 1, 1, 1, 0, 0]  # states


async def test_a_commit_waits_for_another_process_off_the_loop(queue: SqliteQueue) -> None:
    hold_write_lock(queue.path, 0.25)
    ticker = Ticker()

    started = time.monotonic()
    [item] = await queue.commit([EmissionRun(A, "up.out", "in", [0], 0.5, claim=1)], claim_for="c")
    waited = time.monotonic() - started

    assert waited >= 0.15 and ticker.stop() >= 10
    assert (item.seq, item.deliveries) == (1, 1)
    assert (await queue.stats()).extra["busy_fallbacks"] >= 1


async def test_a_closed_queue_says_so(queue: SqliteQueue) -> None:
    await queue.close()
    with pytest.raises(QueueError, match="closed"):
        await queue.stats()


# -- another process holding the lock -------------------------------------------


async def test_a_locked_file_moves_the_work_off_the_event_loop(queue: SqliteQueue) -> None:
    await queue.enqueue([NewItem(A, "emission", {"n": 0})])
    hold_write_lock(queue.path, 0.25)
    ticker = Ticker()

    started = time.monotonic()
    [item] = await queue.enqueue([NewItem(A, "emission", {"n": 1})], claim_for="c")
    waited = time.monotonic() - started
    ticks = ticker.stop()

    assert waited >= 0.15  # it did wait for the lock ...
    assert ticks >= 10  # ... while the loop kept running
    assert item.seq == 2
    stats = await queue.stats()
    assert stats.extra["busy_fallbacks"] >= 1
    assert stats.enqueued == 2


async def test_a_lock_held_too_long_is_unavailable(tmp_path: Path) -> None:
    q = SqliteQueue(tmp_path / "queue.sqlite3", busy_timeout_s=0.1)
    hold_write_lock(q.path, 0.6)

    with pytest.raises(QueueUnavailable, match="locked by another process"):
        await q.enqueue([NewItem(A, "emission", {})])
    await q.close()


async def test_cancelling_a_waiting_call_keeps_the_connection_safe(queue: SqliteQueue) -> None:
    hold_write_lock(queue.path, 0.3)
    waiting = asyncio.create_task(queue.enqueue([NewItem(A, "emission", {"n": 0})]))
    await asyncio.sleep(0.05)

    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    stats = await queue.stats()  # waits for the worker thread, then runs

    # Documented: the operation ran to the end in the worker thread.
    assert stats.enqueued == 1
    [item] = await queue.claim("c", {A: 1})
    assert item.payload == {"n": 0}


# -- several processes -----------------------------------------------------------


async def test_processes_sharing_one_file_claim_every_item_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    await SqliteQueue(path).close()  # create the schema once, so children only open it
    producers, per_producer = 2, 1500
    # Producer p enqueues, per i, one item to A and every third i one to B too.
    total = producers * (per_producer + len(range(0, per_producer, 3)))
    procs = [child("produce", str(path), str(p), str(per_producer)) for p in range(producers)]
    procs += [child("consume", str(path), f"consumer{c}", str(total)) for c in range(2)]

    records: list[dict[str, Any]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        records += json.loads(out)

    keys = [(r["payload"]["p"], r["payload"]["i"], r["stream"]) for r in records]
    assert len(keys) == total
    assert len(set(keys)) == total  # nothing lost, nothing handed out twice
    assert len({r["entry_id"] for r in records}) == total
    assert {r["deliveries"] for r in records} == {1}
    for by in {r["by"] for r in records}:
        for stream in ("a", "b"):
            seqs = [r["seq"] for r in records if r["by"] == by and r["stream"] == stream]
            assert seqs == sorted(seqs), (by, stream)  # each consumer saw its share in order
    q = SqliteQueue(path)
    stats = await q.stats()
    await q.close()
    assert (stats.enqueued, stats.acked, stats.backlog, stats.redelivered) == (total, total, 0, 0)


async def test_claims_of_a_killed_process_are_redelivered(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    proc = child("hold", str(path))
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "holding"

    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    q = SqliteQueue(path)
    backlog = await q.backlog()
    assert (backlog[A].pending, backlog[A].ready) == (5, 1)
    await asyncio.sleep(0.15)
    reclaimed = await q.reclaim_stale(100, consumer="rescuer")

    assert [(i.seq, i.payload["n"], i.deliveries) for i in reclaimed] == [
        (n + 1, n, 2) for n in range(5)
    ]
    assert [i.payload["n"] for i in await q.claim("rescuer", {A: 10})] == [5]
    assert (await q.stats()).redelivered == 5
    await q.close()


# -- child processes -------------------------------------------------------------


def _record(item: Any, by: str) -> dict[str, Any]:
    return {
        "entry_id": item.entry_id,
        "stream": item.stream.node,
        "seq": item.seq,
        "deliveries": item.deliveries,
        "payload": dict(item.payload.get("value", item.payload)),  # committed: the value
        "by": by,
    }


async def _produce(path: str, p: int, count: int) -> list[dict[str, Any]]:
    """Producer 0 enqueues, producer 1 commits runs (acking in the same commit)."""
    q = SqliteQueue(path)
    me = f"producer{p}"
    mine: list[dict[str, Any]] = []
    acks: list[str] = []
    for i in range(count):
        claim_for = me if i % 2 else None
        streams = [A, B] if i % 3 == 0 else [A]
        if p % 2:
            runs = [EmissionRun(s, "p.out", "in", [{"p": p, "i": i}], 0.0, 1) for s in streams]
            stored = await q.commit(runs, claim_for=claim_for, ack=acks[:32])
            del acks[:32]
        else:
            items = [NewItem(s, "emission", {"p": p, "i": i}) for s in streams]
            stored = await q.enqueue(items, claim_for=claim_for)
        for item in stored:
            if item.deliveries:
                mine.append(_record(item, me))
                acks.append(item.entry_id)
        if len(acks) >= 32 and not p % 2:
            await q.ack(acks)
            acks = []
    await q.ack(acks)
    await q.close()
    return mine


async def _consume(path: str, me: str, total: int) -> list[dict[str, Any]]:
    q = SqliteQueue(path)
    mine: list[dict[str, Any]] = []
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        items = await q.claim(me, {A: 16, B: 16}, block_ms=50)
        mine += [_record(item, me) for item in items]
        if items:
            await q.ack([item.entry_id for item in items])
        elif (await q.stats()).acked >= total:
            break
    await q.close()
    return mine


async def _hold(path: str) -> None:
    q = SqliteQueue(path)
    await q.enqueue([NewItem(A, "emission", {"n": n}) for n in range(3)])
    await q.claim("doomed", {A: 3})
    await q.enqueue([NewItem(A, "emission", {"n": n}) for n in (3, 4)], claim_for="doomed")
    await q.enqueue([NewItem(A, "emission", {"n": 5})])
    print("holding", flush=True)
    await asyncio.sleep(60)


def main(argv: list[str]) -> None:
    role, *args = argv
    if role == "produce":
        print(json.dumps(asyncio.run(_produce(args[0], int(args[1]), int(args[2])))))
    elif role == "consume":
        print(json.dumps(asyncio.run(_consume(args[0], args[1], int(args[2])))))
    elif role == "hold":
        asyncio.run(_hold(args[0]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
