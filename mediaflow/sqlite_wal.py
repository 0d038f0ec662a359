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
