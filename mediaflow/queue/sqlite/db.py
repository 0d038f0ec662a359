"""The SQLite connection of a queue handle, and where its transactions run.

A transaction here takes ~10 µs, less than handing work to a thread, so
:meth:`SqliteDb.run` first runs it inline on the event-loop thread with
``busy_timeout`` 0. If another process holds the write lock (SQLITE_BUSY), the
same transaction is retried in a single worker thread that waits for the lock
with a long busy timeout, so the loop never blocks on another process. An
:class:`asyncio.Lock` keeps the loop off the connection while the worker
thread uses it. With ``synchronous=NORMAL`` the only fsyncs are checkpoints;
those run in the worker thread too, on a connection of their own, instead of
inside a commit on the loop thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, ParamSpec, TypeVar

from mediaflow.queue.contract import QueueError, QueueUnavailable
from mediaflow.queue.sqlite import schema as sql
from mediaflow.sqlite_wal import enable_wal, is_busy

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger(__name__)

SyncMode = Literal["NORMAL", "FULL"]

# Commits between two background checkpoints. Each small commit appends a
# handful of pages to the WAL, so this keeps it at a few MiB.
CHECKPOINT_EVERY: Final = 500
# Safety net if background checkpoints fall behind: SQLite then checkpoints
# inline once the WAL holds this many pages (~40 MiB).
AUTOCHECKPOINT_PAGES: Final = 20_000
PAGE_SIZE: Final = 2048


class _Transaction:
    """``with db.write as cur:`` runs the block in one transaction.

    One reusable instance per kind: transactions of a connection never nest,
    and a class with ``__enter__`` costs less per call than a generator-based
    context manager on a path that runs tens of thousands of times a second.
    """

    def __init__(self, db: SqliteDb, begin: str, counts: bool) -> None:
        self._db = db
        self._begin = begin
        self._counts = counts

    def __enter__(self) -> sqlite3.Cursor:
        cur = self._db.cursor
        cur.execute(self._begin)
        return cur

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        db = self._db
        if exc_type is None:
            try:
                db.cursor.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
            if self._counts:
                db.commits += 1
        else:
            self._rollback()

    def _rollback(self) -> None:
        # A failed BEGIN leaves no transaction behind; anything later does.
        if self._db.connection.in_transaction:
            self._db.connection.execute("ROLLBACK")


class SqliteDb:
    """One connection to the queue file, its worker thread and its checkpoints.

    Opening is synchronous and raises :class:`QueueUnavailable` if the file
    cannot be opened or is not a queue database of a version we understand.
    """

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_s: float = 30.0,
        synchronous: SyncMode = "NORMAL",
    ) -> None:
        self.path = path
        self.busy_fallbacks = 0  # operations that had to wait for another process
        self.commits = 0  # write transactions since the last background checkpoint
        self.snapshot_reads = 0  # live_digests reads open on this handle (see _restart_wal)
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        self._sync = synchronous
        self._lock = asyncio.Lock()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="mediaflow-sqlite-queue")
        self._checkpointer: sqlite3.Connection | None = None  # used by the worker thread only
        self._copying: Future[None] | None = None  # the bulk step of a checkpoint
        self._conn: sqlite3.Connection | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = self._connect()
            self._create_schema(self._conn)
            self._conn.execute("PRAGMA busy_timeout = 0")
        except (OSError, sqlite3.Error) as exc:
            if self._conn is not None:
                self._conn.close()
            self._executor.shutdown(wait=False)
            raise self.unavailable(exc) from exc
        self.connection: sqlite3.Connection = self._conn
        self.cursor = self._conn.cursor()
        self.write = _Transaction(self, "BEGIN IMMEDIATE", counts=True)
        self.read = _Transaction(self, "BEGIN", counts=False)  # one snapshot for several reads

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
            check_same_thread=False,  # the worker thread borrows it under self._lock
            timeout=self._busy_timeout_ms / 1000,  # while opening only
        )
        try:
            # A new file only. Smaller pages make each commit's WAL frames
            # cheaper (~20% on the enqueue+ack path, measured against 4096);
            # rows up to ~2000 bytes still fit in one page.
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            mode = enable_wal(conn, self._busy_timeout_ms / 1000)
            if mode != "wal":
                raise QueueUnavailable(f"{self.path}: WAL mode unavailable (journal_mode={mode})")
            conn.execute(f"PRAGMA synchronous = {self._sync}")
            conn.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
            conn.execute("PRAGMA journal_size_limit = 67108864")  # trim a WAL that grew past this
            conn.execute("PRAGMA cache_size = -2048")  # hot pages fit; more is only RSS
        except BaseException:
            conn.close()
            raise
        return conn

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > sql.SCHEMA_VERSION:
            raise QueueUnavailable(
                f"{self.path}: queue schema {version} is newer than this mediaflow "
                f"understands ({sql.SCHEMA_VERSION})"
            )
        if version < sql.SCHEMA_VERSION:
            # Every statement is IF NOT EXISTS, so two processes racing here is harmless.
            conn.executescript(
                f"BEGIN IMMEDIATE;{sql.SCHEMA}PRAGMA user_version = {sql.SCHEMA_VERSION};COMMIT;"
            )

    def unavailable(self, exc: BaseException) -> QueueUnavailable:
        """The :class:`QueueUnavailable` to raise for ``exc``, naming the file and cause."""
        if isinstance(exc, QueueUnavailable):
            return exc
        where = f"sqlite queue {self.path}"
        if getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL":
            return QueueUnavailable(f"{where}: disk full ({exc})")
        if is_busy(exc):
            seconds = self._busy_timeout_ms / 1000
            return QueueUnavailable(
                f"{where}: locked by another process for more than {seconds:g} s ({exc})"
            )
        return QueueUnavailable(f"{where}: {type(exc).__name__}: {exc}")

    @property
    def closed(self) -> bool:
        return self._conn is None

    def _closed_error(self) -> QueueError:
        return QueueError(f"sqlite queue {self.path} is closed")

    # -- running transactions ------------------------------------------------

    async def run(self, op: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``op`` (one whole transaction, safe to retry from scratch).

        Inline on the loop thread when the file is free; in the worker thread,
        waiting up to the busy timeout, when another process holds the lock.
        Raises :class:`QueueUnavailable` for any SQLite error, and
        :class:`QueueError` after :meth:`close`. Cancelling the caller while
        the worker thread runs ``op`` does not stop ``op``.
        """
        if self._conn is None:
            raise self._closed_error()
        if self._copying is not None and self._copying.done():
            await self._restart_wal()
        if not self._lock.locked():
            try:
                result = op(*args, **kwargs)
            except sqlite3.Error as exc:
                if not is_busy(exc):
                    raise self.unavailable(exc) from exc
            else:
                if self.commits >= CHECKPOINT_EVERY and self._copying is None:
                    self._start_checkpoint()
                return result
        return await self._run_when_free(op, *args, **kwargs)

    async def _run_when_free(self, op: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        await self._lock.acquire()
        try:
            if self._conn is None:
                raise self._closed_error()
            # Our turn: the file may well be free again by now.
            result = op(*args, **kwargs)
        except sqlite3.Error as exc:
            if not is_busy(exc):
                self._lock.release()
                raise self.unavailable(exc) from exc
        except BaseException:
            self._lock.release()
            raise
        else:
            self._lock.release()
            return result
        self.busy_fallbacks += 1
        return await self._in_worker(self._call_waiting, op, args, kwargs)  # keeps the lock

    async def _in_worker(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` in the worker thread; the caller holds ``_lock``, which this releases."""
        try:
            if self._conn is None:
                raise self._closed_error()
            job = asyncio.get_running_loop().run_in_executor(
                self._executor, functools.partial(fn, *args, **kwargs)
            )
        except BaseException:
            self._lock.release()
            raise
        # The thread owns the connection until the job ends, even if our caller
        # is cancelled meanwhile: the job releases the lock, not this coroutine.
        job.add_done_callback(lambda _job: self._lock.release())
        try:
            return await asyncio.shield(job)
        except sqlite3.Error as exc:
            raise self.unavailable(exc) from exc

    def _call_waiting(self, op: Callable[..., T], args: Any, kwargs: Any) -> T:
        conn = self.connection
        conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        try:
            return op(*args, **kwargs)
        finally:
            conn.execute("PRAGMA busy_timeout = 0")

    # -- checkpoints ---------------------------------------------------------
    #
    # A checkpoint copies WAL frames into the database file and fsyncs both:
    # too slow for the loop thread, so it runs in two steps in the worker
    # thread. First a PASSIVE checkpoint copies the bulk while writers go on.
    # But only a WAL copied to its very end is written from the start again,
    # and with a busy writer it never is. So once the bulk is copied, the next
    # operation holds this process's writers off (they wait for the lock, the
    # loop stays free) while a RESTART checkpoint copies the few frames left
    # and waits out other processes' transactions; the next commit then starts
    # the WAL over.

    def _start_checkpoint(self) -> None:
        # A plain concurrent future, polled by run(): a done-callback would need
        # the event loop, which a producer whose awaits all complete inline
        # never yields to.
        self.commits = 0
        self._copying = self._executor.submit(self._checkpoint, "PASSIVE")

    async def _restart_wal(self) -> None:
        copying, self._copying = self._copying, None
        if copying is not None and (exc := copying.exception()) is not None:
            # Not fatal: the WAL grows until the next checkpoint, and a real
            # problem with the file surfaces in the next transaction.
            log.warning("sqlite queue %s: background checkpoint failed: %s", self.path, exc)
        if self.snapshot_reads:
            # RESTART would wait out our own snapshot read (a sweep's), holding
            # writers off meanwhile: let the WAL grow until the read ends.
            return
        await self._lock.acquire()
        try:
            await self._in_worker(self._checkpoint, "RESTART")
        except QueueUnavailable as exc:
            log.warning("sqlite queue %s: background checkpoint failed: %s", self.path, exc)

    def _checkpoint(self, mode: Literal["PASSIVE", "RESTART"]) -> None:
        # Worker thread, on a connection of its own.
        if self._checkpointer is None:
            # The timeout bounds how long RESTART waits for other processes'
            # transactions (ours are held off already); if it gives up, the
            # WAL just starts over one checkpoint later.
            self._checkpointer = sqlite3.connect(self.path, isolation_level=None, timeout=0.25)
            self._checkpointer.execute(f"PRAGMA synchronous = {self._sync}")
        self._checkpointer.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()

    # -- closing -------------------------------------------------------------

    async def close(self) -> None:
        """Close both connections and the worker thread, after any running job. Idempotent."""
        if self._conn is None:
            return
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self._close, conn)
        self._executor.shutdown(wait=True)

    def _close(self, conn: sqlite3.Connection) -> None:
        # Worker thread, queued after any checkpoint already started.
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            log.warning("sqlite queue %s: checkpoint on close failed: %s", self.path, exc)
        finally:
            # The shared cursor first: a statement it still holds (one a failed
            # transaction left behind) would keep the closed connection's files open.
            self.cursor.close()
            conn.close()
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
