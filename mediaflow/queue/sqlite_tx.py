"""Each queue operation as one synchronous SQLite transaction.

:class:`SqliteQueue` decides when and where these run (see
:mod:`mediaflow.queue.sqlite_db`); a method here only says what one
operation does to the file. Every method is a whole transaction, safe to run
again from scratch after SQLITE_BUSY, and touches Python state only for the
stream-id cache, whose entries never go stale (stream rows are never deleted
or renumbered).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from mediaflow.queue import sqlite_schema as sql
from mediaflow.queue.contract import (
    DeadLetter,
    ItemKind,
    NewItem,
    QueueError,
    QueueStats,
    StreamBacklog,
    StreamKey,
    WorkItem,
)
from mediaflow.queue.sqlite_db import SqliteDb

dumps: Final = json.JSONEncoder(separators=(",", ":")).encode
"""Compact JSON; one prebuilt encoder (``json.dumps`` with options builds one per call)."""

Version = tuple[int, int]
"""What a waiting claim compares: (``PRAGMA data_version``, this handle's local changes)."""


def _span(sid: int) -> tuple[int, int]:
    """The id range of stream ``sid``'s items (see :mod:`~mediaflow.queue.sqlite_schema`)."""
    lo = sid << sql.SEQ_BITS
    return lo, lo | sql.MAX_SEQ


class Transactions:
    """The operations of one queue handle, each one transaction on its :class:`SqliteDb`."""

    def __init__(self, db: SqliteDb) -> None:
        self.db = db
        self.local_changes = 0  # bumped by SqliteQueue when it may have made work claimable
        self._stream_ids: dict[StreamKey, int] = {}
        self._stream_keys: dict[int, StreamKey] = {}

    # -- streams -------------------------------------------------------------

    def _stream_id(self, stream: StreamKey) -> int | None:
        """The id of an existing stream, None if nothing was ever enqueued to it."""
        sid = self._stream_ids.get(stream)
        if sid is None:
            row = self.db.cursor.execute(sql.STREAM_ID, (stream.flow, stream.node)).fetchone()
            if row is None:
                return None  # not cached: it may appear any time
            sid = row[0]
            self._remember(StreamKey(stream.flow, stream.node), sid)
        return sid

    def _new_stream_id(self, stream: StreamKey) -> int:
        """The id of ``stream``, created if need be. Not cached here: the row may
        be rolled back with the transaction, and its id given to another stream."""
        cur = self.db.cursor
        cur.execute(sql.ADD_STREAM, (stream.flow, stream.node))
        sid: int = cur.execute(sql.STREAM_ID, (stream.flow, stream.node)).fetchone()[0]
        if sid > sql.MAX_STREAM_ID:
            raise QueueError(f"the queue holds too many streams to add {stream}")
        return sid

    def _stream_key(self, sid: int) -> StreamKey:
        key = self._stream_keys.get(sid)
        if key is None:
            flow, node = self.db.cursor.execute(sql.STREAM_KEY, (sid,)).fetchone()
            key = StreamKey(flow, node)
            self._remember(key, sid)
        return key

    def _remember(self, key: StreamKey, sid: int) -> None:
        # Stream rows are never deleted or renumbered, so this never goes stale.
        self._stream_ids[key] = sid
        self._stream_keys[sid] = key

    def _item(self, row: tuple[int, ItemKind, str, int, float]) -> WorkItem:
        """A WorkItem from (id, kind, payload, deliveries, enqueued_at)."""
        entry, kind, payload, deliveries, enqueued_at = row
        sid = entry >> sql.SEQ_BITS
        seq = entry & sql.MAX_SEQ
        key = self._stream_key(sid)
        return WorkItem(str(entry), key, kind, json.loads(payload), seq, deliveries, enqueued_at)

    def _keep_floors(self, ids: Sequence[tuple[int]]) -> None:
        """Before deleting ``ids``: keep each stream's seqs from being handed out again."""
        for sid in {entry >> sql.SEQ_BITS for (entry,) in ids}:
            lo, hi = _span(sid)
            self.db.cursor.execute(sql.KEEP_FLOOR, (lo, hi, sid))

    # -- enqueue and claim ---------------------------------------------------

    def enqueue(
        self,
        items: Sequence[NewItem],
        payloads: Sequence[str],
        claim_for: str | None,
        now: float,
        ack: Sequence[tuple[int]] = (),
        latest: Sequence[tuple[str, str, str, str]] = (),
    ) -> list[WorkItem]:
        # stream -> [canonical key, first id of the stream, next seq, claim at once?]
        plan: dict[StreamKey, list[Any]] = {}
        fresh: list[tuple[StreamKey, int]] = []  # streams first seen here: cached after commit
        stored: list[WorkItem] = []
        with self.db.write as cur:
            for item, payload in zip(items, payloads, strict=True):
                entry = plan.get(item.stream) or self._plan_stream(
                    item.stream, claim_for is not None, plan, fresh
                )
                key, lo, seq, claimable = entry
                if seq > sql.MAX_SEQ:  # 22 years at 25,000 items/s; refuse, never wrap
                    raise QueueError(f"stream {item.stream} has run out of sequence numbers")
                entry[2] = seq + 1
                due: float | None = None
                holder: str | None = None
                if item.delay_s > 0:
                    state, due, deliveries = sql.DELAYED, now + item.delay_s, 0
                elif claimable and item.claim:
                    state, holder, deliveries = sql.PENDING, claim_for, 1
                else:
                    state, deliveries = sql.READY, 0
                    entry[3] = False  # later items of the stream must not overtake this one
                touched = now if holder else None
                row = (lo + seq, item.kind, payload, state, due, holder, touched, deliveries, now)
                cur.execute(sql.INSERT_ITEM, row)
                stored.append(
                    WorkItem(str(lo + seq), key, item.kind, item.payload, seq, deliveries, now)
                )
            if ack:
                self._keep_floors(ack)
                cur.executemany(sql.ACK, ack)
                if cur.rowcount:
                    cur.execute(sql.ADD_ACKED, (cur.rowcount,))
            if latest:
                cur.executemany(sql.PUT_LATEST, latest)
        for key, sid in fresh:
            self._remember(key, sid)
        return stored

    def _plan_stream(
        self,
        stream: StreamKey,
        claiming: bool,
        plan: dict[StreamKey, list[Any]],
        fresh: list[tuple[StreamKey, int]],
    ) -> list[Any]:
        """Where ``stream``'s next items go: [key, first id, next seq, claim at once?]."""
        sid = self._stream_ids.get(stream)
        if sid is None:
            sid = self._new_stream_id(stream)
            fresh.append((StreamKey(stream.flow, stream.node), sid))
        lo = sid << sql.SEQ_BITS
        state = self.db.cursor.execute(sql.STREAM_STATE, (lo, lo | sql.MAX_SEQ, sid)).fetchone()
        next_seq, ready, parked = state
        key = self._stream_keys.get(sid) or StreamKey(stream.flow, stream.node)
        entry = plan[stream] = [key, lo, next_seq, claiming and not ready and not parked]
        return entry

    def claim(
        self, consumer: str, plan: Sequence[tuple[StreamKey, int]], now: float
    ) -> tuple[list[WorkItem], Version]:
        """Claim per ``plan``; also return the version a waiting claim compares with."""
        claimed: list[WorkItem] = []
        redelivered = 0
        with self.db.write as cur:
            parked: dict[str, int | None] = dict(cur.execute(sql.PARKED).fetchall())
            for stream, wanted in plan:
                n = wanted
                if stream.flow in parked:
                    n = min(n, parked[stream.flow] or 0)  # steps left, None: none
                    if n <= 0:
                        continue
                sid = self._stream_id(stream)
                if sid is None:
                    continue
                key = self._stream_keys[sid]
                lo, hi = _span(sid)
                rows = cur.execute(sql.CLAIM, (consumer, now, lo, hi, n)).fetchall()
                rows.sort()  # RETURNING order is unspecified; hand out oldest first
                for entry, kind, payload, deliveries, enqueued_at in rows:
                    redelivered += deliveries > 1
                    claimed.append(
                        WorkItem(
                            str(entry),
                            key,
                            kind,
                            json.loads(payload),
                            entry - lo,
                            deliveries,
                            enqueued_at,
                        )
                    )
                if stream.flow in parked and rows:
                    left = (parked[stream.flow] or 0) - len(rows)
                    parked[stream.flow] = left
                    cur.execute(sql.SET_STEPS, (left or None, stream.flow))
            if redelivered:
                cur.execute(sql.ADD_REDELIVERED, (redelivered,))
            # Read inside the write lock: any later commit by others changes it.
            version = self.version()
        return claimed, version

    def read_all(self, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return list(self.db.cursor.execute(statement, params).fetchall())

    def version(self) -> Version:
        return self.db.cursor.execute("PRAGMA data_version").fetchone()[0], self.local_changes

    # -- finishing and holding -----------------------------------------------

    def ack(self, ids: Sequence[tuple[int]]) -> int:
        with self.db.write as cur:
            self._keep_floors(ids)
            cur.executemany(sql.ACK, ids)
            acked = cur.rowcount
            if acked:
                cur.execute(sql.ADD_ACKED, (acked,))
        return acked

    def release_consumer(self, consumer: str) -> int:
        with self.db.write as cur:
            cur.execute(sql.RELEASE_CONSUMER, (consumer,))
            return cur.rowcount

    def write_many(self, statement: str, rows: Sequence[tuple[Any, ...]]) -> int:
        """Run ``statement`` once per row in one transaction; return the rows changed."""
        with self.db.write as cur:
            cur.executemany(statement, rows)
            return cur.rowcount

    def reclaim(self, cutoff: float, consumer: str | None, now: float) -> list[WorkItem]:
        with self.db.write as cur:
            if consumer is None:
                rows = cur.execute(sql.RECLAIM_TO_READY, (cutoff,)).fetchall()
            else:
                rows = cur.execute(sql.RECLAIM_FOR, (consumer, now, cutoff)).fetchall()
                if rows:
                    cur.execute(sql.ADD_REDELIVERED, (len(rows),))
            rows.sort()
            return [self._item(row) for row in rows]

    def dead_letter(
        self, ids: Sequence[tuple[int]], flow: str, record: str, reason: str, now: float
    ) -> None:
        with self.db.write as cur:
            self._keep_floors(ids)
            cur.executemany(sql.DELETE_ITEM, ids)
            cur.execute(sql.INSERT_DEAD, (flow, record, reason, now))
            cur.execute(sql.ADD_DEAD)

    def dead_letters(self, flow: str | None, limit: int) -> list[DeadLetter]:
        cur = self.db.cursor
        if flow is None:
            rows = cur.execute(sql.DEAD_ALL, (limit,)).fetchall()
        else:
            rows = cur.execute(sql.DEAD_OF_FLOW, (flow, limit)).fetchall()
        letters = []
        for record, reason, dead_at in rows:
            d = json.loads(record)
            stream = StreamKey(d["flow"], d["node"])
            item = WorkItem(
                d["entry_id"],
                stream,
                d["kind"],
                d["payload"],
                d["seq"],
                d["deliveries"],
                d["enqueued_at"],
            )
            letters.append(DeadLetter(item, reason, dead_at))
        return letters

    # -- storage lifecycle ---------------------------------------------------

    def trim_dead(self, before: float, keep_per_flow: int, limit: int) -> int:
        """Delete up to ``limit`` dead letters older than ``before`` or beyond the
        newest ``keep_per_flow`` of their flow; the caller repeats while it gets
        ``limit`` (each call is one short transaction)."""
        with self.db.write as cur:
            cur.execute(sql.TRIM_DEAD_BEFORE, (before, limit))
            deleted = cur.rowcount
            for (flow,) in cur.execute(sql.DEAD_FLOWS).fetchall():
                if deleted >= limit:
                    break
                if keep_per_flow > 0:
                    row = cur.execute(sql.DEAD_NTH_NEWEST, (flow, keep_per_flow - 1)).fetchone()
                    if row is None:
                        continue  # the flow has no more than it may keep
                    oldest_kept = row[0]
                else:
                    oldest_kept = (1 << 63) - 1  # every id: keep none
                cur.execute(sql.TRIM_DEAD_OF_FLOW, (flow, oldest_kept, limit - deleted))
                deleted += cur.rowcount
        return deleted

    def forget_flow(self, flow: str) -> dict[str, int]:
        with self.db.write as cur:
            waiting = 0
            for (sid,) in cur.execute(sql.STREAMS_OF_FLOW, (flow,)).fetchall():
                waiting += cur.execute(sql.COUNT_IN_RANGE, _span(sid)).fetchone()[0]
            if waiting:
                raise QueueError(
                    f"flow {flow!r} still has {waiting} item(s) waiting in the queue; "
                    "forget it once they have been consumed or dead-lettered"
                )
            cur.execute(sql.FORGET_LATEST, (flow,))
            latest = cur.rowcount
            cur.execute(sql.FORGET_DEAD, (flow,))
            return {"latest": latest, "dead_letters": cur.rowcount}

    # -- looking at the queue ------------------------------------------------

    def backlog(self) -> dict[StreamKey, StreamBacklog]:
        counts: dict[int, list[int]] = {}
        oldest: dict[int, float] = {}
        with self.db.read as cur:
            for sid, state, n, first_id in cur.execute(sql.BACKLOG).fetchall():
                counts.setdefault(sid, [0, 0, 0])[state] = n
                at = cur.execute(sql.ENQUEUED_AT, (first_id,)).fetchone()[0]
                oldest[sid] = min(at, oldest.get(sid, at))
            return {
                self._stream_key(sid): StreamBacklog(ready, pending, delayed, oldest[sid])
                for sid, (ready, pending, delayed) in counts.items()
            }

    def parked(self) -> dict[str, int | None]:
        return dict(self.db.cursor.execute(sql.PARKED).fetchall())

    def stats(self) -> QueueStats:
        with self.db.read as cur:
            enqueued, acked, dead, redelivered, backlog = cur.execute(sql.STATS).fetchone()
            parked = sorted(flow for flow, _steps in cur.execute(sql.PARKED).fetchall())
        extra = {
            "backend": "sqlite",
            "path": str(self.db.path),
            "busy_fallbacks": self.db.busy_fallbacks,
        }
        return QueueStats(enqueued, acked, dead, redelivered, backlog, tuple(parked), extra)
