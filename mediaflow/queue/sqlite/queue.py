"""The embedded work-queue backend: one SQLite file in the data directory.

Durability: WAL mode with ``synchronous=NORMAL``. Once a method returns, what
it wrote survives a crash of the process (SIGKILL included). A power loss or
OS crash can lose the last transactions before a checkpoint;
``MEDIAFLOW_SQLITE_SYNC=FULL`` makes every commit survive those too, at a
large cost in throughput.

Several handles, in one process or several, may share the file: each write is
one ``BEGIN IMMEDIATE`` transaction, so two consumers never claim the same
item. Operations run inline on the event loop while the file is free and move
to a worker thread while another process holds it (see
:mod:`mediaflow.queue.sqlite.db`); the SQL of each operation is in
:mod:`mediaflow.queue.sqlite.tx`, its parameters are built by
:mod:`mediaflow.queue.sqlite.rows`, an operator's handling of dead letters is
in :mod:`mediaflow.queue.sqlite.dead`, and the storage lifecycle is in
:mod:`mediaflow.queue.sqlite.lifecycle` and :mod:`mediaflow.queue.sqlite.live`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from mediaflow.queue.contract import (
    DeadLetter,
    EmissionRun,
    LeaseTable,
    NewItem,
    QueueStats,
    StreamBacklog,
    StreamKey,
    WorkItem,
)
from mediaflow.queue.records import dead_record, per_flow
from mediaflow.queue.sqlite import dead, leases, lifecycle
from mediaflow.queue.sqlite import schema as sql
from mediaflow.queue.sqlite.db import SqliteDb, SyncMode
from mediaflow.queue.sqlite.lifecycle import TRIM_CHUNK as TRIM_CHUNK
from mediaflow.queue.sqlite.live import live_digests
from mediaflow.queue.sqlite.rows import batch_rows, dead_row_id, id_ranges, latest_rows, parse_ids
from mediaflow.queue.sqlite.sizes import waiting_bytes
from mediaflow.queue.sqlite.tx import Transactions

DB_FILENAME: Final = "queue.sqlite3"


class SqliteQueue:
    """A :class:`~mediaflow.queue.contract.WorkQueue` in one SQLite file.

    Opening is synchronous (it may create the file and schema) and raises
    :class:`~mediaflow.queue.contract.QueueUnavailable` if the file cannot be
    opened or is not a queue database. Use a handle from one event loop. Every
    method raises ``QueueUnavailable`` on an SQLite error (``"disk full"`` in
    the message when it is one) and ``QueueError`` after :meth:`close`.

    Blocking: a method that finds the file free runs its transaction on the
    loop thread (~10-20 µs) and returns without suspending, so a task that does
    nothing but commit never lets other tasks run unless it yields itself.
    Only while another process holds the file does a method wait, off the loop.

    Cancellation: a method that had to wait for another process's lock runs to
    the end in the worker thread even if its caller is cancelled, so a
    cancelled ``commit`` may still have committed.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        busy_timeout_s: float = 30.0,
        synchronous: SyncMode = "NORMAL",
    ) -> None:
        """``path`` is the database file; ``busy_timeout_s`` bounds the wait for
        another process's lock; ``synchronous`` is NORMAL or FULL
        (the ``MEDIAFLOW_SQLITE_SYNC`` setting, see :func:`mediaflow.config.sqlite_sync`)."""
        self.path = Path(path)
        self._busy_timeout_s = busy_timeout_s
        self._db = SqliteDb(self.path, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
        self._tx = Transactions(self._db)

    @classmethod
    def in_dir(cls, data_dir: Path) -> SqliteQueue:
        """The queue of a data directory: ``data_dir / "queue.sqlite3"``."""
        return cls(Path(data_dir) / DB_FILENAME)

    def __repr__(self) -> str:
        return f"SqliteQueue({str(self.path)!r})"

    # -- commit and claim ---------------------------------------------------

    async def commit(
        self,
        batch: Sequence[EmissionRun | NewItem],
        *,
        claim_for: str | None = None,
        ack: Sequence[str] = (),
        latest: Mapping[tuple[str, str, str], Any] | None = None,
    ) -> list[WorkItem]:
        """See :meth:`WorkQueue.commit`.

        Per run, one ``json`` encode of its values and one INSERT from which
        SQLite builds the rows (floats, booleans and strings at the top level
        of a value cost one more encode each: see
        :func:`~mediaflow.queue.sqlite.rows.values_json`); per single item, one
        encode and one INSERT. Acks are deleted by ranges of consecutive ids.
        Values are stored as ``json`` writes them, NaN and infinities as ``NaN``
        and ``Infinity``. Like every method it runs on the loop thread while the
        file is free: ~4.5 µs per value with runs of 64 and the previous batch
        acked (measured, against ~11 µs per single item), so ~0.3 ms for such a
        commit.
        """
        todo = batch_rows(batch)
        acks = id_ranges(ack) if ack else []
        rows = latest_rows(latest)
        if not (todo or acks or rows):
            return []
        return await self._db.run(self._tx.commit, todo, claim_for, time.time(), acks, rows)

    async def put_latest(self, latest: Mapping[tuple[str, str, str], Any]) -> None:
        """See :meth:`WorkQueue.put_latest`."""
        rows = latest_rows(latest)
        if rows:
            await self._db.run(self._tx.write_many, sql.PUT_LATEST, rows)

    async def latest(self, flow: str) -> dict[tuple[str, str], Any]:
        """See :meth:`WorkQueue.latest`."""
        rows = await self._db.run(self._tx.read_all, sql.LATEST_OF_FLOW, (flow,))
        return {(node, port): json.loads(value) for node, port, value in rows}

    async def claim(self, consumer: str, wants: Mapping[StreamKey, int]) -> list[WorkItem]:
        """See :meth:`WorkQueue.claim`. Streams wanted 0 or fewer times are skipped."""
        plan = [(stream, n) for stream, n in wants.items() if n > 0]
        if not plan:
            return []
        return await self._db.run(self._tx.claim, consumer, plan, time.time())

    # -- finishing and holding -----------------------------------------------

    async def ack(self, entry_ids: Sequence[str]) -> int:
        """See :meth:`WorkQueue.ack`. Removes pending items whoever holds them (as
        XACK does); ready items are left alone and not counted."""
        ranges = id_ranges(entry_ids)
        if not ranges:
            return 0
        return await self._db.run(self._tx.ack, ranges)

    async def touch(self, consumer: str, entry_ids: Sequence[str]) -> int:
        """See :meth:`WorkQueue.touch`. An item since reclaimed for someone else,
        released, acked or dead-lettered is no longer held and is not counted."""
        ids = parse_ids(entry_ids)
        if not ids:
            return 0
        now = time.time()
        rows = [(now, i, consumer) for (i,) in ids]
        return await self._db.run(self._tx.write_many, sql.TOUCH, rows)

    async def release(self, entry_ids: Sequence[str], *, started: bool = True) -> int:
        """See :meth:`WorkQueue.release`. Pending items (whoever holds them) become
        ready and keep their place by id; ``deliveries`` stays (the next claim adds
        one) unless ``started`` is False. Returns how many were pending."""
        ids = parse_ids(entry_ids)
        if not ids:
            return 0
        statement = sql.RELEASE if started else sql.RELEASE_UNSTARTED
        return await self._db.run(self._tx.write_many, statement, ids)

    async def release_consumer(self, consumer: str) -> int:
        """See :meth:`WorkQueue.release_consumer`: every item ``consumer`` holds
        becomes ready, keeping its place by id; returns how many."""
        return await self._db.run(self._tx.release_consumer, consumer)

    async def lease(
        self,
        flow: str,
        consumer: str,
        *,
        ttl_ms: int,
        hold: Sequence[StreamKey] = (),
        acquire: Sequence[StreamKey] = (),
        release: Sequence[StreamKey] = (),
        leave: bool = False,
    ) -> LeaseTable:
        """See :meth:`WorkQueue.lease`; one transaction (:mod:`.leases`)."""
        return await self._db.run(
            leases.lease,
            self._tx,
            flow,
            consumer,
            time.time(),
            ttl_ms / 1000,
            hold,
            acquire,
            release,
            leave,
        )

    async def reclaim_stale(self, idle_ms: int) -> list[WorkItem]:
        """See :meth:`WorkQueue.reclaim_stale`. Returns the items released, oldest
        first, with ``deliveries`` as now stored (the next claim counts the
        redelivery). Parking does not apply (these items were handed out before
        the flow was parked)."""
        return await self._db.run(self._tx.reclaim, time.time() - idle_ms / 1000)

    async def dead_letter(self, item: WorkItem, reason: str) -> None:
        """See :meth:`WorkQueue.dead_letter`. ``item`` is recorded as given, even if
        it was acked meanwhile: the caller decided it is dead."""
        record = dead_record(item)
        ranges = id_ranges([item.entry_id])
        flow = item.stream.flow
        await self._db.run(self._tx.dead_letter, ranges, flow, record, reason, time.time())

    async def dead_letters(self, flow: str | None = None, limit: int = 100) -> list[DeadLetter]:
        """See :meth:`WorkQueue.dead_letters`; newest first."""
        return await self._db.run(self._tx.dead_letters, flow, limit)

    async def dead_letter_of(self, flow: str, dead_id: str) -> DeadLetter | None:
        """See :meth:`WorkQueue.dead_letter_of`. A dead letter's id is its row id
        in decimal (:mod:`.dead`)."""
        row_id = dead_row_id(dead_id)
        if row_id is None:
            return None
        return await self._db.run(dead.dead_letter_of, self._tx, flow, row_id)

    async def requeue_dead_letter(self, flow: str, dead_id: str) -> WorkItem | None:
        """See :meth:`WorkQueue.requeue_dead_letter`; one transaction. The item
        takes the stream's next seq, so it is claimed after every item waiting."""
        row_id = dead_row_id(dead_id)
        if row_id is None:
            return None
        return await self._db.run(dead.requeue, self._tx, flow, row_id, time.time())

    async def delete_dead_letter(self, flow: str, dead_id: str) -> bool:
        """See :meth:`WorkQueue.delete_dead_letter`."""
        row_id = dead_row_id(dead_id)
        if row_id is None:
            return False
        return await self._db.run(dead.delete, self._tx, flow, row_id)

    # -- looking at the queue, parking ---------------------------------------

    async def backlog(self) -> dict[StreamKey, StreamBacklog]:
        """See :meth:`WorkQueue.backlog`; streams with nothing unacked are omitted.
        Reads one index (~10 ms per 100k waiting items)."""
        return await self._db.run(self._tx.backlog)

    async def waiting_bytes(self, streams: Sequence[StreamKey]) -> int:
        """Bytes of the artifacts the unacked items of ``streams`` reference (an edge
        box's forward backlog), read in a thread on a connection of its own."""
        return await asyncio.to_thread(waiting_bytes, self.path, streams, self._busy_timeout_s)

    async def backlog_flows(self) -> dict[str, int]:
        """See :meth:`WorkQueue.backlog_flows`; flows with nothing unacked are omitted."""
        return per_flow(await self.backlog())

    async def park(self, flow: str) -> None:
        """See :meth:`WorkQueue.park`. Parking a flow cancels any steps it had left."""
        await self._db.run(self._tx.write_many, sql.PARK, [(flow,)])

    async def unpark(self, flow: str, *, steps: int | None = None) -> None:
        """See :meth:`WorkQueue.unpark`. ``steps`` replaces any steps left, and parks
        the flow if it was not; ``steps=0`` leaves it parked with none. Raises
        ``ValueError`` for negative ``steps``."""
        if steps is None:
            await self._db.run(self._tx.write_many, sql.UNPARK, [(flow,)])
        elif steps < 0:
            raise ValueError(f"steps must be at least 0, not {steps}")
        else:
            await self._db.run(self._tx.write_many, sql.PARK_STEPS, [(flow, steps or None)])

    async def parked(self) -> dict[str, int | None]:
        """See :meth:`WorkQueue.parked`."""
        return await self._db.run(self._tx.parked)

    async def stats(self) -> QueueStats:
        """Counters persisted in the file. ``extra``: ``backend``, ``path``,
        ``busy_fallbacks`` (how many operations of this handle had to wait for
        another process's lock) and ``requeued`` (dead letters put back)."""
        return await self._db.run(self._tx.stats)

    # -- storage lifecycle ---------------------------------------------------

    def live_digests(self, *, batch: int = 1000) -> AsyncIterator[list[str]]:
        """See :meth:`WorkQueue.live_digests` and
        :func:`mediaflow.queue.sqlite.live.live_digests` (an async generator)."""
        return live_digests(self._db, batch=batch, busy_timeout_s=self._busy_timeout_s)

    async def trim_dead_letters(self, *, before: float, keep_per_flow: int) -> int:
        """See :meth:`WorkQueue.trim_dead_letters`. Deletes in transactions of at
        most :data:`TRIM_CHUNK` rows, yielding to the loop between them, so other
        handles and processes keep writing meanwhile. Raises ``ValueError`` for a
        negative ``keep_per_flow``."""
        return await lifecycle.trim_dead_letters(
            self._db, before=before, keep_per_flow=keep_per_flow
        )

    async def forget_flow(self, flow: str) -> dict[str, int]:
        """See :meth:`WorkQueue.forget_flow`. One transaction: the check and the
        deletions see the same file."""
        return await self._db.run(lifecycle.forget_flow, self._db, flow)

    async def close(self) -> None:
        """See :meth:`WorkQueue.close`. Idempotent."""
        await self._db.close()
