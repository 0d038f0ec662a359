"""The store's SQLite schema (``store.sqlite3``) and its migration from older files.

- ``artifacts``: one row per digest. ``created_at`` is the first save (the age
  GC orders by); ``saved_at`` is the latest save of the same bytes, refreshed
  every time, so an old digest saved again (a still scene, silence) gets a new
  grace period before GC may take it.
- ``run_artifact``: keeps. ``kind`` is ``recording`` (``ctx.more.keep``: evictable
  under the disk cap, oldest first) or ``hold`` (``ctx.more.hold``: a node still
  uses the reference; never evicted). ``expires_at`` NULL keeps forever.
- ``store_totals``: bytes and count of ``artifacts``, kept by triggers, so the
  disk-cap watcher reads two numbers instead of summing a million rows.
- ``gc_counters``: what sweeps did, in any process, for ``/metrics``.
"""

from __future__ import annotations

import sqlite3
from typing import Final

SCHEMA_VERSION: Final = 2

_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS artifacts (
        digest TEXT PRIMARY KEY,
        size INTEGER NOT NULL,
        media_type TEXT NOT NULL,
        created_at REAL NOT NULL,
        saved_at REAL NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS run_artifact (
        run_id TEXT NOT NULL,
        digest TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL,
        kind TEXT NOT NULL DEFAULT 'recording',
        PRIMARY KEY (run_id, digest)
    ) WITHOUT ROWID""",
)

# Everything after the tables: safe on a file of any version once its tables
# have every column.
_REST: Final = (
    "CREATE INDEX IF NOT EXISTS artifacts_by_age ON artifacts (created_at, digest)",
    "CREATE INDEX IF NOT EXISTS run_artifact_by_digest ON run_artifact (digest)",
    """CREATE INDEX IF NOT EXISTS run_artifact_by_expiry ON run_artifact (expires_at)
        WHERE expires_at IS NOT NULL""",
    """CREATE TABLE IF NOT EXISTS store_totals (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        bytes INTEGER NOT NULL,
        count INTEGER NOT NULL
    )""",
    """INSERT OR IGNORE INTO store_totals (id, bytes, count)
        SELECT 1, COALESCE(SUM(size), 0), COUNT(*) FROM artifacts""",
    """CREATE TRIGGER IF NOT EXISTS artifacts_added AFTER INSERT ON artifacts BEGIN
        UPDATE store_totals SET bytes = bytes + NEW.size, count = count + 1 WHERE id = 1;
    END""",
    """CREATE TRIGGER IF NOT EXISTS artifacts_removed AFTER DELETE ON artifacts BEGIN
        UPDATE store_totals SET bytes = bytes - OLD.size, count = count - 1 WHERE id = 1;
    END""",
    """CREATE TABLE IF NOT EXISTS gc_counters (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        sweeps INTEGER NOT NULL DEFAULT 0,
        deleted INTEGER NOT NULL DEFAULT 0,
        freed_bytes INTEGER NOT NULL DEFAULT 0,
        evicted INTEGER NOT NULL DEFAULT 0,
        evicted_bytes INTEGER NOT NULL DEFAULT 0,
        last_sweep_at REAL,
        last_sweep_s REAL
    )""",
    "INSERT OR IGNORE INTO gc_counters (id) VALUES (1)",
)

# Version 1 had neither ``saved_at`` nor the keep's expiry and kind.
_FROM_V1: Final = (
    "ALTER TABLE artifacts ADD COLUMN saved_at REAL NOT NULL DEFAULT 0",
    "UPDATE artifacts SET saved_at = created_at",
    "ALTER TABLE run_artifact ADD COLUMN expires_at REAL",
    "ALTER TABLE run_artifact ADD COLUMN kind TEXT NOT NULL DEFAULT 'recording'",
)


class SchemaTooNew(sqlite3.DatabaseError):
    """The file was written by a newer mediaflow."""


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the file to :data:`SCHEMA_VERSION`. Caller holds ``BEGIN IMMEDIATE``."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"store.sqlite3 has schema version {version}; this mediaflow reads up to"
            f" {SCHEMA_VERSION}: upgrade mediaflow"
        )
    has_tables = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'artifacts'"
    ).fetchone()
    steps = (_FROM_V1 if has_tables and version < 2 else ()) + _TABLES + _REST
    for statement in steps:
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
