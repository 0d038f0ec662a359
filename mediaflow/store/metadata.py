"""The metadata half of the store: one SQLite file, shared by every process on a data dir.

WAL mode lets readers go on while a writer commits; ``busy_timeout`` makes a
writer that meets another process's lock wait instead of failing. Every
statement runs in autocommit, so no transaction is held across a Python
call. A save upserts: the first size, media type and creation time of a
digest stay, and every save refreshes ``saved_at`` (two processes saving the
same bytes both succeed and leave one row). The schema is in
:mod:`mediaflow.store.schema`.

One connection per store, shared by threads under a lock: statements are
tiny, and one connection keeps ``close()`` simple.
"""

from __future__ import annotations

import errno
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediaflow.sqlite_wal import connect_shared
from mediaflow.store.errors import StoreFull
from mediaflow.store.schema import migrate

BUSY_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class Row:
    digest: str
    size: int
    media_type: str
    created_at: float
    saved_at: float


@dataclass(frozen=True)
class StoreTotals:
    """What the store holds: every artifact, and those an unexpired keep protects."""

    bytes: int
    count: int
    kept_bytes: int
    kept_count: int


@dataclass(frozen=True)
class GcCounters:
    """What sweeps did on this store, summed over every process and run."""

    sweeps: int
    deleted: int
    freed_bytes: int
    evicted: int
    evicted_bytes: int
    last_sweep_at: float | None
    last_sweep_s: float | None


@dataclass(frozen=True)
class SweepWork:
    """One sweep's work, added to :class:`GcCounters`."""

    deleted: int
    freed_bytes: int
    evicted: int
    evicted_bytes: int
    swept_at: float
    took_s: float


@dataclass(frozen=True)
class _Result:
    """A statement's rows, read to the end under the connection's lock.

    A cursor left half-read keeps a read transaction open on the shared
    connection; another thread's write on it then fails at once with
    SQLITE_BUSY_SNAPSHOT ("database is locked") if any other connection
    committed meanwhile, instead of waiting its turn.
    """

    rows: list[Any]
    rowcount: int

    def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[Any]:
        return self.rows


class Metadata:
    """The ``artifacts`` and ``run_artifact`` tables. Every method blocks (briefly)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        """The connection, opened and migrated on first use. Caller holds the lock.
        Artifact files are fsynced, and a row a power cut lost is rebuilt by the next
        save: ``synchronous = NORMAL`` is enough here."""
        if self._conn is None:
            self._conn = connect_shared(self.path, BUSY_TIMEOUT_MS, migrate)
        return self._conn

    def _run(self, sql: str, params: tuple[object, ...] = ()) -> _Result:
        with self._lock:
            try:
                cursor = self._connect().execute(sql, params)
                return _Result(cursor.fetchall(), cursor.rowcount)
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                    raise StoreFull(
                        errno.ENOSPC,
                        f"artifact store full: its metadata could not grow ({exc});"
                        " free space or lower ARTIFACT_MAX_BYTES",
                        str(self.path),
                    ) from exc
                raise

    def record(self, row: Row) -> None:
        """Insert ``row``, or refresh the saved time of the digest's row (the first
        size, media type and creation time stay)."""
        self._run(
            "INSERT INTO artifacts (digest, size, media_type, created_at, saved_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest)"
            " DO UPDATE SET saved_at = MAX(saved_at, excluded.saved_at)",
            (row.digest, row.size, row.media_type, row.created_at, row.saved_at),
        )

    def get(self, digest: str) -> Row | None:
        found = self._run(
            "SELECT digest, size, media_type, created_at, saved_at FROM artifacts WHERE digest = ?",
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
                "SELECT digest, size, media_type, created_at, saved_at FROM artifacts"
                " WHERE (created_at, digest) > (?, ?) ORDER BY created_at, digest LIMIT ?",
                (*after, batch),
            ).fetchall()
            for found in page:
                yield Row(*found)
            if len(page) < batch:
                return
            after = (page[-1][3], page[-1][0])

    def total_bytes(self) -> int:
        return int(self._run("SELECT bytes FROM store_totals WHERE id = 1").fetchone()[0])

    def totals(self, now: float) -> StoreTotals:
        stored = self._run("SELECT bytes, count FROM store_totals WHERE id = 1").fetchone()
        kept = self._run(
            "SELECT COALESCE(SUM(size), 0), COUNT(*) FROM artifacts WHERE digest IN"
            " (SELECT digest FROM run_artifact WHERE expires_at IS NULL OR expires_at > ?)",
            (now,),
        ).fetchone()
        return StoreTotals(int(stored[0]), int(stored[1]), int(kept[0]), int(kept[1]))

    def keep(
        self, run_id: str, digest: str, created_at: float, expires_at: float | None, kind: str
    ) -> bool | None:
        """Record that ``run_id`` keeps ``digest`` (until ``expires_at``, None: forever).

        True if recorded now, False if this run kept it already (its expiry and
        kind are replaced), None if the digest has no row. The insert selects
        the row in the same statement, so a concurrent delete cannot slip
        between the check and the insert.
        """
        with self._lock:
            existed = (
                self._connect()
                .execute(
                    "SELECT 1 FROM run_artifact WHERE run_id = ? AND digest = ?", (run_id, digest)
                )
                .fetchone()
            )
        cursor = self._run(
            "INSERT INTO run_artifact (run_id, digest, created_at, expires_at, kind)"
            " SELECT ?, digest, ?, ?, ? FROM artifacts WHERE digest = ?"
            " ON CONFLICT (run_id, digest)"
            " DO UPDATE SET expires_at = excluded.expires_at, kind = excluded.kind",
            (run_id, created_at, expires_at, kind, digest),
        )
        if cursor.rowcount != 1:
            return None
        return existed is None

    def unkeep(self, run_id: str, digest: str) -> bool:
        """Drop one keep; True if there was one."""
        cursor = self._run(
            "DELETE FROM run_artifact WHERE run_id = ? AND digest = ?", (run_id, digest)
        )
        return cursor.rowcount == 1

    def is_kept(self, digest: str, now: float) -> bool:
        found = self._run(
            "SELECT 1 FROM run_artifact WHERE digest = ?"
            " AND (expires_at IS NULL OR expires_at > ?) LIMIT 1",
            (digest, now),
        )
        return found.fetchone() is not None

    def release(self, run_id: str) -> int:
        """Forget every digest ``run_id`` kept; return how many rows went."""
        return self._run("DELETE FROM run_artifact WHERE run_id = ?", (run_id,)).rowcount

    def gc_counters(self) -> GcCounters:
        found = self._run(
            "SELECT sweeps, deleted, freed_bytes, evicted, evicted_bytes, last_sweep_at,"
            " last_sweep_s FROM gc_counters WHERE id = 1"
        ).fetchone()
        return GcCounters(*found)

    def add_gc_counters(self, work: SweepWork) -> None:
        self._run(
            "UPDATE gc_counters SET sweeps = sweeps + 1, deleted = deleted + ?,"
            " freed_bytes = freed_bytes + ?, evicted = evicted + ?,"
            " evicted_bytes = evicted_bytes + ?, last_sweep_at = ?, last_sweep_s = ?"
            " WHERE id = 1",
            (
                work.deleted,
                work.freed_bytes,
                work.evicted,
                work.evicted_bytes,
                work.swept_at,
                work.took_s,
            ),
        )

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                conn.close()
