"""Switching a SQLite file to WAL mode when several processes open it together.

Every database of a data directory (the queue, the run records, the store's
metadata) is opened by each process that works on it: ``mediaflow run``,
``mediaflow worker`` and ``mediaflow serve`` start together on the same files.
Changing the journal mode of a fresh file needs an exclusive lock, and SQLite
answers SQLITE_BUSY there without consulting the busy handler (two
connections that both hold a read lock and both want to write would
deadlock), so the connection's busy timeout does not cover it. Once one
connection has switched, the file stays in WAL mode and the others' pragma
changes nothing.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

FIRST_PAUSE_S = 0.001
LONGEST_PAUSE_S = 0.05


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite saying another connection holds the lock
    (SQLITE_BUSY or one of its extended codes)."""
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY


def enable_wal(conn: sqlite3.Connection, timeout_s: float) -> str:
    """Run ``PRAGMA journal_mode = WAL`` on ``conn``, retrying for up to
    ``timeout_s`` while another connection holds the file, and return the mode
    SQLite reports (``"wal"``, or the mode it kept where WAL is unavailable).

    Raises ``sqlite3.OperationalError`` if the file is still locked past
    ``timeout_s``, or for any other error.
    """
    deadline = time.monotonic() + timeout_s
    pause = FIRST_PAUSE_S
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE_S)


JOURNAL_SIZE_LIMIT = 4 << 20  # the WAL file is truncated back to this after a checkpoint


def connect_shared(
    path: Path, busy_timeout_ms: int, migrate: Callable[[sqlite3.Connection], None]
) -> sqlite3.Connection:
    """A connection to ``path`` for one object shared by threads under its own lock
    (``check_same_thread`` off, autocommit): WAL mode (:func:`enable_wal`),
    ``synchronous = NORMAL`` (a power cut may lose the last commits but never
    corrupts), a bounded WAL file, and ``migrate(conn)`` run inside ``BEGIN IMMEDIATE``
    so processes opening a fresh file together migrate it in turn. Closed again if
    any of that raises."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        enable_wal(conn, busy_timeout_ms / 1000)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        conn.execute("BEGIN IMMEDIATE")
        migrate(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.close()
        raise
    return conn
