"""Run records: one per run of a flow, in ``state.sqlite3``.

(The latest value per port lives with the work queue, written in the same
transaction as the emission that carries it.)

A run record says whether the last run of a flow ended cleanly. A run that
did not (the process was killed) is *resumed* by the next ``mediaflow run``:
its unacked items are reclaimed and its sources are not started twice.

A run also carries its *horizon* for garbage collection: a time ``H`` such
that every reference the run holds in memory without having made it durable
(emitted and committed, kept or held, or dropped at the end of its item) was
saved at or after ``H``. It is written when the run starts (its start time)
and at every heartbeat (the runner's :meth:`~mediaflow.engine.runner.FlowRunner.horizon`);
a sweep deletes nothing saved after the horizon of an open run whose owner
may be alive.

Old records are pruned (:meth:`StateStore.prune_runs`), so a flow that runs
for a week holds about as many as after an hour.

Blocking SQLite calls; the runner calls them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mediaflow.sqlite_wal import enable_wal

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, flow TEXT NOT NULL, owner TEXT NOT NULL,
    started_at REAL NOT NULL, heartbeat_at REAL NOT NULL,
    ended_at REAL, outcome TEXT, horizon REAL
);
CREATE INDEX IF NOT EXISTS runs_by_flow ON runs (flow, started_at);
"""

_COLUMNS: Final = "run_id, flow, owner, started_at, heartbeat_at, ended_at, outcome, horizon"

# Ended runs older than ?1, except the newest ?2 runs of each flow (open or not).
_PRUNE: Final = """
DELETE FROM runs WHERE run_id IN (
    SELECT run_id FROM (
        SELECT run_id, ended_at,
               ROW_NUMBER() OVER (PARTITION BY flow ORDER BY started_at DESC) AS newest
        FROM runs
    )
    WHERE newest > ?2 AND ended_at IS NOT NULL AND ended_at < ?1
)
"""

# A WAL that a burst of writes grew is cut back to this after a checkpoint.
JOURNAL_SIZE_LIMIT: Final = 4 * 1024 * 1024
BUSY_TIMEOUT_S: Final = 30.0
"""How long opening or writing waits while another process holds the file."""


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    flow: str
    owner: str
    started_at: float
    heartbeat_at: float
    ended_at: float | None
    outcome: str | None
    horizon: float | None = None
    """See the module docstring; None only in a record written before horizons."""

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


class StateStore:
    """SQLite-backed run records (``state.sqlite3``). Safe for several threads.

    Opening creates the file, or adds the ``horizon`` column to one written by
    an older mediaflow. Every method blocks and may raise ``sqlite3.Error``.
    """

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / "state.sqlite3"
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        enable_wal(self._db, BUSY_TIMEOUT_S)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
        self._db.executescript(_SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        # Under the write lock, so two processes opening an old file at once
        # add the column once.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
            if "horizon" not in columns:
                self._db.execute("ALTER TABLE runs ADD COLUMN horizon REAL")
        except BaseException:
            self._db.rollback()
            raise
        self._db.commit()

    def last_run(self, flow: str) -> RunRecord | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM runs WHERE flow=? ORDER BY started_at DESC LIMIT 1",
                (flow,),
            ).fetchone()
        return RunRecord(*row) if row else None

    def open_runs(self) -> list[RunRecord]:
        """Every run not recorded as ended (running, or its process died), oldest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM runs WHERE ended_at IS NULL ORDER BY started_at"
            ).fetchall()
        return [RunRecord(*row) for row in rows]

    def start_run(self, run_id: str, flow: str, owner: str) -> RunRecord:
        """Record a new run; its horizon is its start (it holds nothing yet)."""
        now = time.time()
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO runs (run_id, flow, owner, started_at, heartbeat_at, horizon) "
                "VALUES (?,?,?,?,?,?)",
                (run_id, flow, owner, now, now, now),
            )
        return RunRecord(run_id, flow, owner, now, now, None, None, now)

    def adopt_run(self, run_id: str, owner: str) -> None:
        """Take over a crashed run: it is now this process's. What the dead process
        held in memory died with it, so the horizon starts again at now."""
        now = time.time()
        with self._lock, self._db:
            self._db.execute(
                "UPDATE runs SET owner=?, heartbeat_at=?, horizon=? WHERE run_id=?",
                (owner, now, now, run_id),
            )

    def heartbeat(self, run_id: str, horizon: float | None = None) -> None:
        """The run's owner is alive now; its horizon is ``horizon`` (None: now,
        for a run that holds no unemitted reference)."""
        now = time.time()
        with self._lock, self._db:
            self._db.execute(
                "UPDATE runs SET heartbeat_at=?, horizon=? WHERE run_id=?",
                (now, now if horizon is None else horizon, run_id),
            )

    def end_run(self, run_id: str, outcome: str) -> None:
        with self._lock, self._db:
            self._db.execute(
                "UPDATE runs SET ended_at=?, outcome=? WHERE run_id=?",
                (time.time(), outcome, run_id),
            )

    def prune_runs(self, *, ended_before: float, keep_per_flow: int = 20) -> int:
        """Delete runs that ended before ``ended_before``, except the newest
        ``keep_per_flow`` runs of each flow; open runs are never deleted. Returns
        how many went. Raises ``ValueError`` if ``keep_per_flow`` < 1: a flow's
        newest run says whether its last run ended cleanly."""
        if keep_per_flow < 1:
            raise ValueError(f"keep_per_flow must be at least 1, not {keep_per_flow}")
        with self._lock, self._db:
            return self._db.execute(_PRUNE, (ended_before, keep_per_flow)).rowcount

    def forget_flow(self, flow: str) -> int:
        """Delete every ended run of ``flow``; return how many. Open runs stay."""
        with self._lock, self._db:
            return self._db.execute(
                "DELETE FROM runs WHERE flow=? AND ended_at IS NOT NULL", (flow,)
            ).rowcount

    def close(self) -> None:
        with self._lock:
            self._db.close()
