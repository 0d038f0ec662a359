"""The metadata half of the store: one SQLite file, shared by every process on a data dir.

WAL mode lets readers go on while a writer commits; ``busy_timeout`` makes a
writer that meets another process's lock wait instead of failing. Every
statement runs in autocommit, so no transaction is held across a Python
call. ``INSERT OR IGNORE`` keeps the first row for a digest: two processes
saving the same bytes both succeed and leave one row.

One connection per store, shared by threads under a lock: statements are
tiny, and one connection keeps ``close()`` simple.
"""

from __future__ import annotations

import errno
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mediaflow.store.errors import StoreFull

BUSY_TIMEOUT_MS = 30_000
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS artifacts (
    digest TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    media_type TEXT NOT NULL,
    created_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS artifacts_by_age ON artifacts (created_at, digest);
CREATE TABLE IF NOT EXISTS run_artifact (
    run_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, digest)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS run_artifact_by_digest ON run_artifact (digest);
"""


@dataclass(frozen=True)
class Row:
    digest: str
    size: int
    media_type: str
    created_at: float


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL, retrying while another process holds the database.

    Changing the journal mode needs an exclusive lock, and SQLite may answer
    SQLITE_BUSY there without consulting the busy handler: two processes
    opening a fresh store together hit it. Once one has switched, the file
    stays in WAL mode and the others' pragma is a no-op.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", None) in (
                sqlite3.SQLITE_BUSY,
                sqlite3.SQLITE_LOCKED,
            )
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class Metadata:
    """The ``artifacts`` and ``run_artifact`` tables. Every method blocks (briefly)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        """The connection, opened and migrated on first use. Caller holds the lock."""
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,  # shared by worker threads under self._lock
            )
            try:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                _enable_wal(conn)
                # NORMAL in WAL mode: a power cut may lose the last commits but never corrupts;
                # artifact files are fsynced, and a missing row is rebuilt by the next save.
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("BEGIN IMMEDIATE")  # processes starting together migrate in turn
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _run(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        with self._lock:
            try:
                return self._connect().execute(sql, params)
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                    raise StoreFull(
                        errno.ENOSPC, f"artifact metadata could not grow: {exc}", str(self.path)
                    ) from exc
                raise

    def record(self, row: Row) -> bool:
        """Insert ``row`` unless the digest has one; True if this call inserted it."""
        cursor = self._run(
            "INSERT OR IGNORE INTO artifacts (digest, size, media_type, created_at)"
            " VALUES (?, ?, ?, ?)",
            (row.digest, row.size, row.media_type, row.created_at),
        )
        return cursor.rowcount == 1

    def get(self, digest: str) -> Row | None:
        found = self._run(
            "SELECT digest, size, media_type, created_at FROM artifacts WHERE digest = ?",
            (digest,),
        ).fetchone()
        return None if found is None else Row(*found)

    def remove(self, digest: str) -> bool:
        """Delete the digest's row (not its ``run_artifact`` rows); True if there was one."""
        return self._run("DELETE FROM artifacts WHERE digest = ?", (digest,)).rowcount == 1

    def rows_by_age(self, *, batch: int = 500) -> Iterator[Row]:
        """Every row, oldest first, fetched ``batch`` at a time.

        Keyset paging: no cursor stays open between batches, so a caller may
        delete rows (GC does) while iterating.
        """
        after: tuple[float, str] = (float("-inf"), "")
        while True:
            page = self._run(
                "SELECT digest, size, media_type, created_at FROM artifacts"
                " WHERE (created_at, digest) > (?, ?) ORDER BY created_at, digest LIMIT ?",
                (*after, batch),
            ).fetchall()
            for found in page:
                yield Row(*found)
            if len(page) < batch:
                return
            after = (page[-1][3], page[-1][0])

    def total_bytes(self) -> int:
        return int(self._run("SELECT COALESCE(SUM(size), 0) FROM artifacts").fetchone()[0])

    def keep(self, run_id: str, digest: str, created_at: float) -> bool | None:
        """Record that ``run_id`` keeps ``digest``.

        True if recorded now, False if it was already kept by this run, None if
        the digest has no row. One statement, so a concurrent ``remove`` cannot
        slip between the check and the insert.
        """
        cursor = self._run(
            "INSERT OR IGNORE INTO run_artifact (run_id, digest, created_at)"
            " SELECT ?, digest, ? FROM artifacts WHERE digest = ?",
            (run_id, created_at, digest),
        )
        if cursor.rowcount == 1:
            return True
        kept = self._run(
            "SELECT 1 FROM run_artifact WHERE run_id = ? AND digest = ?", (run_id, digest)
        ).fetchone()
        return False if kept is not None else None

    def is_kept(self, digest: str) -> bool:
        found = self._run("SELECT 1 FROM run_artifact WHERE digest = ? LIMIT 1", (digest,))
        return found.fetchone() is not None

    def release(self, run_id: str) -> int:
        """Forget every digest ``run_id`` kept; return how many rows went."""
        return self._run("DELETE FROM run_artifact WHERE run_id = ?", (run_id,)).rowcount

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                conn.close()
