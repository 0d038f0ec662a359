"""The artifact digests a queue file holds, read from one snapshot (for the sweep).

:class:`LiveDigestReader` answers :meth:`WorkQueue.live_digests
<mediaflow.queue.contract.WorkQueue.live_digests>` for the SQLite backend. It
opens a connection of its own and reads every table that can hold a reference
(items in any state, dead letters, latest values) inside ONE read transaction,
in keyset pages. WAL mode gives that transaction a fixed snapshot: writers go
on meanwhile and are simply not seen, so an item forwarded while the pages are
read (its input acked and its output enqueued in one commit) is seen in
exactly one of its two places, never in neither.

Each page is blocking work (~1 ms per 1,000 rows); :func:`live_digests` runs
:meth:`LiveDigestReader.next_batch` in a worker thread, never on the loop.
The open snapshot keeps a checkpoint from recycling the WAL past it, so the
WAL may grow while a sweep reads; it starts over after the reader closes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from mediaflow.eventloop import run_blocking
from mediaflow.media import DIGEST_RE
from mediaflow.queue.contract import QueueError
from mediaflow.queue.sqlite import schema as sql
from mediaflow.queue.sqlite.db import SqliteDb

# Where each table's pages start (keysets compare greater-than these).
_ITEMS: Final = 0
_DEAD: Final = 1
_LATEST: Final = 2
_DONE: Final = 3


async def live_digests(
    db: SqliteDb, *, batch: int, busy_timeout_s: float
) -> AsyncIterator[list[str]]:
    """:meth:`SqliteQueue.live_digests <mediaflow.queue.sqlite.SqliteQueue.live_digests>`
    of the queue whose connection is ``db`` (an async generator).

    Reads on a connection of its own, in one read transaction (WAL gives it a
    fixed snapshot; writers are not held up), ``batch`` rows a page, each page
    in a worker thread; empty pages are not yielded. The transaction ends when
    the iteration does or the generator is closed (``aclose``). While it is
    open ``db``'s checkpoints do not wait for it (the WAL grows for that long
    instead). Raises ``ValueError`` for ``batch`` < 1, :class:`QueueError` if
    ``db`` is closed, :class:`~mediaflow.queue.contract.QueueUnavailable` on an
    SQLite error.
    """
    if db.closed:
        raise QueueError(f"sqlite queue {db.path} is closed")
    try:
        reader = await asyncio.to_thread(
            LiveDigestReader, db.path, batch=batch, busy_timeout_s=busy_timeout_s
        )
    except sqlite3.Error as exc:
        raise db.unavailable(exc) from exc
    db.snapshot_reads += 1
    try:
        while True:
            try:
                found = await run_blocking(reader.next_batch)  # closed below only after it
            except sqlite3.Error as exc:
                raise db.unavailable(exc) from exc
            if found is None:
                return
            if found:
                yield found
    finally:
        db.snapshot_reads -= 1
        await asyncio.to_thread(reader.close)


class LiveDigestReader:
    """Pages of distinct digests from one snapshot of a queue file.

    Any thread may call it; calls take turns (a :meth:`close` issued while a
    cancelled caller's page is still being read waits for that page).
    :meth:`close` ends the read transaction; call it whatever happens.
    """

    def __init__(self, path: Path, *, batch: int, busy_timeout_s: float) -> None:
        """Opens the connection and starts the read transaction. Blocking;
        raises ``sqlite3.Error``. The snapshot is fixed by the first page."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, not {batch}")
        self._batch = batch
        self._phase = _ITEMS
        self._after: Any = 0  # the last key read in the current table
        self._turn = threading.Lock()
        self._closed = False
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_s
        )
        try:
            self._conn.execute(sql.SCAN_CACHE)
            self._conn.execute("BEGIN")  # deferred: the first SELECT fixes the snapshot
        except BaseException:
            self._conn.close()
            raise

    def next_batch(self) -> list[str] | None:
        """The distinct digests of the next page of rows (an empty list when the
        page held none), or None once every table has been read. Blocking."""
        with self._turn:
            return self._next_batch()

    def _next_batch(self) -> list[str] | None:
        cur = self._conn.cursor()
        while self._phase != _DONE:
            if self._phase == _ITEMS:
                rows = cur.execute(sql.LIVE_ITEMS, (self._after, self._batch)).fetchall()
            elif self._phase == _DEAD:
                rows = cur.execute(sql.LIVE_DEAD, (self._after, self._batch)).fetchall()
            elif self._after is None:
                rows = cur.execute(sql.LIVE_LATEST_FIRST, (self._batch,)).fetchall()
            else:
                rows = cur.execute(sql.LIVE_LATEST_AFTER, (*self._after, self._batch)).fetchall()
            if not rows:
                self._phase += 1
                self._after = None if self._phase == _LATEST else 0
                continue
            found: set[str] = set()
            for row in rows:
                found.update(DIGEST_RE.findall(row[-1]))
            last = rows[-1]
            self._after = last[0] if self._phase != _LATEST else (last[0], last[1], last[2])
            return sorted(found)
        return None

    def close(self) -> None:
        """End the read transaction and close the connection. Blocking; idempotent."""
        with self._turn:
            if self._closed:
                return
            self._closed = True
            try:
                if self._conn.in_transaction:
                    self._conn.execute("COMMIT")
            finally:
                self._conn.close()
