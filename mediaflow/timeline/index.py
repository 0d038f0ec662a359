"""The timeline index: a recorder's clips and the events, by wall-clock time.

``timeline.sqlite3`` in the data directory, beside the store's metadata. A recorder
notes each clip it keeps (``ctx.more.note_clip``); an event node notes each event
(``ctx.more.note_event``). The server reads it to answer
``/api/recordings/{flow}/{node}``, exports and the wall's timeline.

Rows are keyed by what they are about (a clip by its recorder and start; an event
by its node, type, source, zone and start), so noting the same clip or event again
(a redelivered item, an event's end) replaces the row instead of adding one. A clip's bytes live in
the store: a clip the disk cap evicted keeps its row, and the timeline shows its
time as a gap (see :mod:`mediaflow.timeline.spans`).

Every method blocks briefly (one small SQLite statement); one connection is shared
under a lock, so a node's thread and the event loop may both call it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mediaflow.media import MediaRef
from mediaflow.sqlite_wal import connect_shared
from mediaflow.timeline.events import TimelineEvent

FILE_NAME: Final = "timeline.sqlite3"
BUSY_TIMEOUT_MS: Final = 30_000
SCHEMA_VERSION: Final = 1

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS clips (
        flow TEXT NOT NULL,
        node TEXT NOT NULL,
        start REAL NOT NULL,
        end REAL NOT NULL,
        digest TEXT NOT NULL,
        ref TEXT NOT NULL,
        sources TEXT NOT NULL,
        PRIMARY KEY (flow, node, start)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS clips_by_end ON clips (flow, node, end)",
    "CREATE INDEX IF NOT EXISTS clips_by_digest ON clips (digest)",
    """CREATE TABLE IF NOT EXISTS events (
        flow TEXT NOT NULL,
        node TEXT NOT NULL,
        type TEXT NOT NULL,
        source TEXT NOT NULL,
        start REAL NOT NULL,
        end REAL,
        score REAL NOT NULL,
        zone TEXT NOT NULL,
        text TEXT,
        snapshot TEXT,
        snapshot_digest TEXT,
        PRIMARY KEY (flow, node, type, source, zone, start)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS events_by_start ON events (flow, start)",
    """CREATE INDEX IF NOT EXISTS events_by_snapshot ON events (snapshot_digest)
        WHERE snapshot_digest IS NOT NULL""",
)


@dataclass(frozen=True)
class RecordedClip:
    """One clip a recorder kept: ``[start, end)`` on the wall clock, its reference,
    and the capturing nodes it holds (the camera, its microphone)."""

    flow: str
    node: str
    start: float
    end: float
    ref: MediaRef
    sources: tuple[str, ...] = ()

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class NotedEvent:
    """An event as the index holds it: which node of which flow noted it."""

    flow: str
    node: str
    event: TimelineEvent

    def to_json(self) -> dict[str, Any]:
        return {"flow": self.flow, "node": self.node, **self.event.to_json()}


class TimelineIndex:
    """``timeline.sqlite3`` (see the module doc)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> TimelineIndex:
        return cls(data_dir / FILE_NAME)

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = connect_shared(self.path, BUSY_TIMEOUT_MS, self._migrate)
        return self._conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"{self.path} has schema version {version}; this mediaflow reads up"
                f" to {SCHEMA_VERSION}: upgrade mediaflow"
            )
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _execute(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        with self._lock:
            return self._connect().execute(sql, tuple(params)).fetchall()

    def note_clip(self, clip: RecordedClip) -> None:
        self._execute(
            "INSERT OR REPLACE INTO clips (flow, node, start, end, digest, ref, sources)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                clip.flow,
                clip.node,
                clip.start,
                clip.end,
                clip.ref.digest,
                json.dumps(clip.ref.to_json()),
                json.dumps(list(clip.sources)),
            ),
        )

    def clips(self, flow: str, node: str, start: float, end: float) -> list[RecordedClip]:
        """The clips of recorder ``node`` overlapping ``[start, end)``, oldest first."""
        rows = self._execute(
            "SELECT start, end, ref, sources FROM clips"
            " WHERE flow = ? AND node = ? AND end > ? AND start < ? ORDER BY start",
            (flow, node, start, end),
        )
        return [
            RecordedClip(
                flow,
                node,
                row[0],
                row[1],
                MediaRef.from_json(json.loads(row[2])),
                tuple(json.loads(row[3])),
            )
            for row in rows
        ]

    def recorders(self, flow: str) -> list[str]:
        """The recorder nodes of ``flow`` that noted a clip."""
        return [
            row[0]
            for row in self._execute("SELECT DISTINCT node FROM clips WHERE flow = ?", (flow,))
        ]

    def note_event(self, flow: str, node: str, event: TimelineEvent) -> None:
        self._execute(
            "INSERT OR REPLACE INTO events"
            " (flow, node, type, source, start, end, score, zone, text, snapshot, snapshot_digest)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                flow,
                node,
                event.type,
                event.source,
                event.start,
                event.end,
                event.score,
                event.zone or "",  # a key column: '' for the whole picture
                event.text,
                None if event.snapshot is None else json.dumps(event.snapshot.to_json()),
                None if event.snapshot is None else event.snapshot.digest,
            ),
        )

    def events(
        self,
        flow: str,
        start: float,
        end: float,
        *,
        sources: Iterable[str] | None = None,
        types: Iterable[str] | None = None,
        limit: int = 1000,
    ) -> list[NotedEvent]:
        """The events of ``flow`` overlapping ``[start, end)`` (one still going counts
        as lasting), oldest first, at most ``limit``; only of ``sources`` and ``types``
        when given."""
        where = ["flow = ?", "start < ?", "(end IS NULL OR end >= ?)"]
        params: list[object] = [flow, end, start]
        for column, values in (("source", sources), ("type", types)):
            if values is not None:
                chosen = list(values)
                where.append(f"{column} IN ({', '.join('?' * len(chosen))})")
                params.extend(chosen)
        rows = self._execute(
            "SELECT node, type, source, start, end, score, zone, text, snapshot FROM events"
            f" WHERE {' AND '.join(where)} ORDER BY start, node, type, source LIMIT ?",
            (*params, limit),
        )
        return [
            NotedEvent(
                flow,
                row[0],
                TimelineEvent(
                    type=row[1],
                    source=row[2],
                    start=row[3],
                    end=row[4],
                    score=row[5],
                    zone=row[6] or None,
                    text=row[7],
                    snapshot=None if row[8] is None else MediaRef.from_json(json.loads(row[8])),
                ),
            )
            for row in rows
        ]

    def holds(self, flow: str, digest: str) -> bool:
        """Whether ``digest`` is a clip or an event's snapshot of ``flow`` (what the
        flow's timeline shows: a wall link of the flow may read it)."""
        return bool(
            self._execute(
                "SELECT 1 FROM clips WHERE digest = ? AND flow = ?"
                " UNION ALL SELECT 1 FROM events WHERE snapshot_digest = ? AND flow = ? LIMIT 1",
                (digest, flow, digest, flow),
            )
        )

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
