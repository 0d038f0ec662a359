"""The sweep's own connection to ``store.sqlite3``: the live set on disk, and the queries.

The digests that live messages hold go into a temporary table (on disk, not in
memory: ``temp_store = FILE``), so a sweep's memory stays flat however many
artifacts the queue references; candidates are then an anti-join, read a page
at a time in age order. Every method blocks; the sweep calls them from a worker
thread, one thread at a time.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from mediaflow.store import ArtifactStore
from mediaflow.store.locks import try_delete_lock
from mediaflow.store.metadata import BUSY_TIMEOUT_MS

PAGE = 500  # rows per candidate page
# Deletions per exclusive batch: savers wait at most this long. A deletion (row and
# unlink) costs ~0.75 ms on a virtual disk, so a batch holds savers ~50 ms: under
# the quarter second of frames a camera's JPEG lane rides out (200 held them for
# 150 ms, and back-to-back batches for longer: the camera skipped frames).
BATCH = 64
# A pause between two batches: savers blocked on the lock take it before the next
# batch does (an flock waiter and the sweeper otherwise race, and the sweeper,
# already running, wins). ~10 % on a long sweep's time.
BATCH_GAP_S = 0.005

_UNEXPIRED_KEEP = (
    "SELECT 1 FROM run_artifact k WHERE k.digest = a.digest"
    " AND (k.expires_at IS NULL OR k.expires_at > :now)"
)
_LIVE = "SELECT 1 FROM live l WHERE l.digest = a.digest"
_HOLD = (
    "SELECT 1 FROM run_artifact h WHERE h.digest = a.digest AND h.kind = 'hold'"
    " AND (h.expires_at IS NULL OR h.expires_at > :now)"
)
# What nothing protects but its age: the rule every deletion checks.
_COLLECTABLE = f"a.saved_at < :cutoff AND NOT EXISTS ({_LIVE}) AND NOT EXISTS ({_UNEXPIRED_KEEP})"

# The collect step takes every candidate, so it walks the table in its own (digest)
# order: each lookup then lands next to the last one, and a batch's files share
# fan-out directories. Several times faster than age order on a million rows.
_UNREFERENCED = f"""
SELECT a.digest, a.size, a.created_at, a.saved_at FROM artifacts AS a
WHERE a.digest > :after AND {_COLLECTABLE}
ORDER BY a.digest LIMIT :limit
"""

# The cap takes only as much as it must, oldest first.
_CANDIDATES = f"""
SELECT a.digest, a.size, a.created_at, a.saved_at FROM artifacts AS a
WHERE (a.created_at, a.digest) > (:after_at, :after) AND {_COLLECTABLE}
ORDER BY a.created_at, a.digest LIMIT :limit
"""

# Kept recordings that nothing else protects, oldest keep first: what the cap evicts
# first. A hold or a live message on the same digest rules it out.
_RECORDINGS = f"""
SELECT a.digest, a.size, MIN(r.created_at) AS kept_at, a.saved_at FROM run_artifact AS r
JOIN artifacts AS a ON a.digest = r.digest
WHERE r.kind = 'recording' AND (r.expires_at IS NULL OR r.expires_at > :now)
  AND a.saved_at < :cutoff AND NOT EXISTS ({_LIVE}) AND NOT EXISTS ({_HOLD})
GROUP BY a.digest HAVING (kept_at, a.digest) > (:after_at, :after)
ORDER BY kept_at, a.digest LIMIT :limit
"""

_DELETE_ROW = f"""
DELETE FROM artifacts AS a WHERE a.digest = :digest AND a.saved_at < :cutoff
  AND NOT EXISTS ({_UNEXPIRED_KEEP})
"""
# Only when the row then goes too: not under a hold, nor after a save refreshed the
# row since the cap chose it (the artifact stays, and so must its keep).
_DROP_RECORDING_KEEPS = (
    "DELETE FROM run_artifact WHERE digest = :digest AND kind = 'recording' AND EXISTS"
    f" (SELECT 1 FROM artifacts a WHERE a.digest = :digest AND a.saved_at < :cutoff"
    f" AND NOT EXISTS ({_HOLD}))"
)


@dataclass(frozen=True)
class Candidate:
    digest: str
    size: int
    at: float  # created_at, or for a recording when it was first kept
    saved_at: float


@dataclass
class Deleted:
    """What one batch removed, and what it had to leave (a response was sending it)."""

    digests: list[Candidate]
    skipped_sending: int = 0

    @property
    def bytes(self) -> int:
        return sum(c.size for c in self.digests)


def _file_of(store: ArtifactStore, digest: str) -> str:
    """``store.path_for(digest)`` as a string, the same layout without building Paths:
    those cost ~6 us a victim (a sixth of a small artifact's deletion)."""
    hex_digits = digest[len("sha256:") :]
    return os.path.join(store.artifacts_dir, hex_digits[0:2], hex_digits[2:4], hex_digits)


class GcDb:
    """One sweep's connection. Use from one thread at a time; :meth:`close` when done."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self._conn.execute("PRAGMA temp_store = FILE")
        self._conn.execute("PRAGMA cache_size = -8000")  # 8 MB, whatever the store's size
        # As the store's own connections: a power cut may lose the last deletions'
        # commits (their files are gone; the next sweep removes the rows), never corrupt.
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.execute("CREATE TEMP TABLE live (digest TEXT PRIMARY KEY) WITHOUT ROWID")

    def close(self) -> None:
        self._conn.close()

    # -- roots --------------------------------------------------------------

    def add_live(self, digests: Iterable[str]) -> None:
        self._conn.execute("BEGIN")
        self._conn.executemany(
            "INSERT OR IGNORE INTO live (digest) VALUES (?)", ((d,) for d in digests)
        )
        self._conn.execute("COMMIT")

    def live_count(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM live").fetchone()[0])

    def protected_bytes(self, now: float) -> int:
        """Bytes of artifacts that a live message or an unexpired hold protects."""
        found = self._conn.execute(
            "SELECT COALESCE(SUM(a.size), 0) FROM artifacts AS a WHERE"
            f" EXISTS ({_LIVE}) OR EXISTS ({_HOLD})",
            {"now": now},
        ).fetchone()
        return int(found[0])

    def expired_recordings(self, now: float) -> set[str]:
        """Digests whose recording keep has run out (the flow's ``retention_days``)."""
        rows = self._conn.execute(
            "SELECT digest FROM run_artifact WHERE expires_at <= ? AND kind = 'recording'",
            (now,),
        )
        return {digest for (digest,) in rows}

    def expired_keeps(self, now: float, cutoff: float, *, drop: bool) -> int:
        """Count (and with ``drop``, delete) the keeps that have run out.

        A keep whose artifact is still in its grace (saved at or after ``cutoff``)
        stays until the artifact goes, so the sweep that deletes it still knows
        it was a recording whose retention ended.
        """
        where = (
            "expires_at <= :now AND NOT EXISTS (SELECT 1 FROM artifacts AS a"
            " WHERE a.digest = run_artifact.digest AND a.saved_at >= :cutoff)"
        )
        params = {"now": now, "cutoff": cutoff}
        if drop:
            return self._conn.execute(f"DELETE FROM run_artifact WHERE {where}", params).rowcount
        found = self._conn.execute(f"SELECT COUNT(*) FROM run_artifact WHERE {where}", params)
        return int(found.fetchone()[0])

    # -- what may go --------------------------------------------------------

    def unreferenced(self, cutoff: float, now: float) -> Iterator[list[Candidate]]:
        """Every unreferenced artifact saved before ``cutoff``, in digest order, a page
        at a time (keyset paging: the caller may delete each page first)."""
        yield from self._pages(_UNREFERENCED, cutoff, now)

    def candidates(self, cutoff: float, now: float) -> Iterator[list[Candidate]]:
        """Unreferenced artifacts saved before ``cutoff``, oldest first, a page at a time.

        Keyset paging, so the caller may delete each page before asking for the next."""
        yield from self._pages(_CANDIDATES, cutoff, now)

    def recordings(self, cutoff: float, now: float) -> Iterator[list[Candidate]]:
        """Kept recordings the cap may evict, oldest keep first, a page at a time."""
        yield from self._pages(_RECORDINGS, cutoff, now)

    def _pages(self, sql: str, cutoff: float, now: float) -> Iterator[list[Candidate]]:
        after_at, after = float("-inf"), ""
        while True:
            params = {
                "cutoff": cutoff,
                "now": now,
                "after_at": after_at,
                "after": after,
                "limit": PAGE,
            }
            page = [Candidate(*row) for row in self._conn.execute(sql, params)]
            if not page:
                return
            yield page
            after_at, after = page[-1].at, page[-1].digest

    # -- deleting -----------------------------------------------------------

    def delete(
        self,
        store: ArtifactStore,
        victims: Sequence[Candidate],
        *,
        cutoff: float,
        now: float,
        recordings: bool = False,
    ) -> Deleted:
        """Delete ``victims`` (at most :data:`BATCH`) with savers held off.

        Each row goes only if it still qualifies inside the transaction (saved
        before ``cutoff``, no unexpired keep; for ``recordings``, its recording
        keeps are dropped first unless a hold appeared), and each file only if
        no response is sending it. A file is unlinked before the commit: a
        crash in between leaves a row without a file, which the next sweep
        removes.
        """
        done = Deleted([])
        with store.save_lock.exclusive():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for victim in victims:
                    if self._delete_one(store, victim, cutoff, now, recordings, done):
                        done.digests.append(victim)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return done

    def _delete_one(
        self,
        store: ArtifactStore,
        victim: Candidate,
        cutoff: float,
        now: float,
        recordings: bool,
        done: Deleted,
    ) -> bool:
        path = _file_of(store, victim.digest)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            fd = -1  # a row whose file a crash took: only the row is left to remove
        try:
            if fd >= 0 and not try_delete_lock(fd):
                done.skipped_sending += 1
                return False
            params = {"digest": victim.digest, "cutoff": cutoff, "now": now}
            if recordings:
                self._conn.execute(_DROP_RECORDING_KEEPS, params)
            if self._conn.execute(_DELETE_ROW, params).rowcount != 1:
                return False
            if fd >= 0:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            return True
        finally:
            if fd >= 0:
                os.close(fd)

    # -- orphans ------------------------------------------------------------

    def unrecorded(self, digests: Sequence[str]) -> list[str]:
        """Those of ``digests`` without a row."""
        marks = ",".join("?" * len(digests))
        known = {
            d
            for (d,) in self._conn.execute(
                f"SELECT digest FROM artifacts WHERE digest IN ({marks})", tuple(digests)
            )
        }
        return [d for d in digests if d not in known]

    def adopt(self, rows: Sequence[tuple[str, int, float]]) -> int:
        """Record files found without a row (digest, size, mtime) as octet-stream
        artifacts saved at their mtime; rows that appeared meanwhile stay."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            cursor = self._conn.executemany(
                "INSERT OR IGNORE INTO artifacts (digest, size, media_type, created_at, saved_at)"
                " VALUES (?, ?, 'application/octet-stream', ?, ?)",
                [(d, size, at, at) for d, size, at in rows],
            )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return cursor.rowcount
