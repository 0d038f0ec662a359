"""The SQLite queue with other processes on its file: waiting for another process's
lock without blocking the loop, several processes claiming every item exactly once,
and the claims of a killed process redelivered.

Child processes run this file as a module (see ``main`` at the bottom).
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
from pathlib import Path
from typing import Any

import pytest

from mediaflow.queue import EmissionRun, NewItem, QueueUnavailable, SqliteQueue
from tests.queue_sqlite_helpers import (
    A,
    B,
    queue_fixture,  # noqa: F401 - the queue fixture
)

REPO = Path(__file__).resolve().parent.parent


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.test_queue_sqlite_processes", *args],
        cwd=REPO,
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


# -- another process holding the lock -------------------------------------------


async def test_a_commit_waits_for_another_process_off_the_loop(queue: SqliteQueue) -> None:
    hold_write_lock(queue.path, 0.25)
    ticker = Ticker()

    started = time.monotonic()
    [item] = await queue.commit([EmissionRun(A, "up.out", "in", [0], 0.5, claim=1)], claim_for="c")
    waited = time.monotonic() - started

    assert waited >= 0.15 and ticker.stop() >= 10
    assert (item.seq, item.deliveries) == (1, 1)
    assert (await queue.stats()).extra["busy_fallbacks"] >= 1


async def test_a_locked_file_moves_the_work_off_the_event_loop(queue: SqliteQueue) -> None:
    await queue.commit([NewItem(A, "emission", {"n": 0})])
    hold_write_lock(queue.path, 0.25)
    ticker = Ticker()

    started = time.monotonic()
    [item] = await queue.commit([NewItem(A, "emission", {"n": 1})], claim_for="c")
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
        await q.commit([NewItem(A, "emission", {})])
    await q.close()


async def test_cancelling_a_waiting_call_keeps_the_connection_safe(queue: SqliteQueue) -> None:
    hold_write_lock(queue.path, 0.3)
    waiting = asyncio.create_task(queue.commit([NewItem(A, "emission", {"n": 0})]))
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
    # As the engine does: hand back what went stale, then claim it.
    reclaimed = await q.reclaim_stale(100)
    claimed = await q.claim("rescuer", {A: 10})

    assert [(i.seq, i.payload["n"]) for i in reclaimed] == [(n + 1, n) for n in range(5)]
    assert [(i.seq, i.payload["n"], i.deliveries) for i in claimed[:5]] == [
        (n + 1, n, 2) for n in range(5)
    ]
    assert [i.payload["n"] for i in claimed[5:]] == [5]
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
            stored = await q.commit(items, claim_for=claim_for)
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
        items = await q.claim(me, {A: 16, B: 16})
        mine += [_record(item, me) for item in items]
        if items:
            await q.ack([item.entry_id for item in items])
        elif (await q.stats()).acked >= total:
            break
        else:
            await asyncio.sleep(0.005)  # nothing ready: poll, as the engine's claim loop does
    await q.close()
    return mine


async def _hold(path: str) -> None:
    q = SqliteQueue(path)
    await q.commit([NewItem(A, "emission", {"n": n}) for n in range(3)])
    await q.claim("doomed", {A: 3})
    await q.commit([NewItem(A, "emission", {"n": n}) for n in (3, 4)], claim_for="doomed")
    await q.commit([NewItem(A, "emission", {"n": 5})])
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
