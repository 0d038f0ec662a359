"""Run records: one per run of a flow, in ``state.sqlite3``.

(The latest value per port lives with the work queue, written in the same
transaction as the emission that carries it.)

A run record says whether the last run of a flow ended cleanly. A run that
did not (the process was killed) is *resumed* by the next ``mediaflow run``:
its unacked items are reclaimed and its sources are not started twice.

Blocking SQLite calls; the runner calls them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, flow TEXT NOT NULL, owner TEXT NOT NULL,
    started_at REAL NOT NULL, heartbeat_at REAL NOT NULL,
    ended_at REAL, outcome TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_flow ON runs (flow, started_at);
"""


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    flow: str
    owner: str
    started_at: float
    heartbeat_at: float
    ended_at: float | None
    outcome: str | None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


class StateStore:
    """SQLite-backed latest values and run records (``state.sqlite3``)."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / "state.sqlite3"
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def last_run(self, flow: str) -> RunRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT run_id, flow, owner, started_at, heartbeat_at, ended_at, outcome "
                "FROM runs WHERE flow=? ORDER BY started_at DESC LIMIT 1",
                (flow,),
            ).fetchone()
        return RunRecord(*row) if row else None

    def start_run(self, run_id: str, flow: str, owner: str) -> RunRecord:
        now = time.time()
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO runs (run_id, flow, owner, started_at, heartbeat_at) "
                "VALUES (?,?,?,?,?)",
                (run_id, flow, owner, now, now),
            )
        return RunRecord(run_id, flow, owner, now, now, None, None)

    def adopt_run(self, run_id: str, owner: str) -> None:
        """Take over a crashed run: it is now this process's."""
        with self._lock, self._db:
            self._db.execute(
                "UPDATE runs SET owner=?, heartbeat_at=? WHERE run_id=?",
                (owner, time.time(), run_id),
            )

    def heartbeat(self, run_id: str) -> None:
        with self._lock, self._db:
            self._db.execute("UPDATE runs SET heartbeat_at=? WHERE run_id=?", (time.time(), run_id))

    def end_run(self, run_id: str, outcome: str) -> None:
        with self._lock, self._db:
            self._db.execute(
                "UPDATE runs SET ended_at=?, outcome=? WHERE run_id=?",
                (time.time(), outcome, run_id),
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()
