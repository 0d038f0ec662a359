"""Each queue operation as one synchronous SQLite transaction.

:class:`SqliteQueue` decides when and where these run (see
:mod:`mediaflow.queue.sqlite.db`); a method here only says what one
operation does to the file. Every method is a whole transaction, safe to run
again from scratch after SQLITE_BUSY, and touches Python state only for the
stream-id cache (:mod:`.streams`), whose entries never go stale. The
storage-lifecycle transactions are in :mod:`mediaflow.queue.sqlite.lifecycle`.

Python work per item is kept out of the write lock where it can be: payloads
of claimed rows are decoded after the commit, all in one ``json.loads``, and
the items of :meth:`Transactions.commit` are built after it from the caller's
own values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mediaflow.queue.contract import (
    DeadLetter,
    EmissionRun,
    NewItem,
    QueueError,
    QueueStats,
    StreamBacklog,
    StreamKey,
    WorkItem,
)
from mediaflow.queue.records import item_of_record
from mediaflow.queue.sqlite import schema as sql
from mediaflow.queue.sqlite.db import SqliteDb
from mediaflow.queue.sqlite.rows import IdRange, ItemRow, RunRow
from mediaflow.queue.sqlite.streams import Row, Streams, decode


@dataclass(frozen=True, slots=True)
class _Taken:
    """The values of a run that :meth:`Transactions.commit` claimed: the first
    ``take`` of ``run``, ids from ``first``, seqs from ``seq``."""

    run: EmissionRun
    key: StreamKey
    first: int
    seq: int
    take: int

    def items(self, now: float) -> list[WorkItem]:
        """The claimed items, built from the caller's own values (nothing decoded)."""
        run, key, first, seq = self.run, self.key, self.first, self.seq
        src, port, at, values = run.src, run.port, run.at, run.values
        return [
            WorkItem(
                str(first + i),
                key,
                "emission",
                {"src": src, "port": port, "value": values[i], "at": at},
                seq + i,
                1,
                now,
            )
            for i in range(self.take)
        ]


class Transactions:
    """The operations of one queue handle, each one transaction on its :class:`SqliteDb`."""

    def __init__(self, db: SqliteDb) -> None:
        self.db = db
        self.streams = Streams(db)

    # -- streams -------------------------------------------------------------

    def append_ready(self, item: WorkItem, payload: str, now: float) -> tuple[StreamKey, int, int]:
        """Inside a write transaction: append ``item`` (``payload`` its JSON) to
        the end of its stream (created if need be), ready and keeping its
        ``deliveries``, enqueued at ``now``; return its stream's key, its id
        and its seq."""
        sid = self.streams.id_of(item.stream)
        if sid is None:  # not cached: the transaction may roll back
            sid = self.streams.new_id(item.stream)
        lo, hi = sql.span(sid)
        seq: int = self.db.cursor.execute(sql.STREAM_STATE, (lo, hi, sid)).fetchone()[0]
        if seq > sql.MAX_SEQ:
            raise QueueError(f"stream {item.stream} has run out of sequence numbers")
        row = (lo + seq, item.kind, payload, sql.READY, None, None, None, item.deliveries, now)
        self.db.cursor.execute(sql.INSERT_ITEM, row)
        key = self.streams.cached_key(sid) or StreamKey(item.stream.flow, item.stream.node)
        return key, lo + seq, seq

    def _keep_floors(self, ranges: Sequence[IdRange]) -> None:
        """Before deleting ``ranges``: keep each stream's seqs from being handed out again."""
        # A range of consecutive ids lies in one stream, or spans the end of one
        # and the start of the next: its two ends name every stream it touches.
        highest: dict[int, int] = {}  # stream id -> the highest id deleted in it
        for first, last in ranges:
            for end in (first, last):
                sid = end >> sql.SEQ_BITS
                lo, hi = sql.span(sid)
                highest[sid] = max(highest.get(sid, lo), min(last, hi))
        for sid, top_deleted in highest.items():
            lo, hi = sql.span(sid)
            self.db.cursor.execute(sql.KEEP_FLOOR, (lo, hi, sid, top_deleted))

    def _ack(self, ranges: Sequence[IdRange]) -> int:
        """Delete the pending items in ``ranges``, count them; inside a transaction."""
        cur = self.db.cursor
        self._keep_floors(ranges)
        cur.executemany(sql.ACK, ranges)
        acked = cur.rowcount  # executemany sums the changes of every range
        if acked:
            cur.execute(sql.ADD_ACKED, (acked,))
        return acked

    def _ack_and_latest(
        self, ack: Sequence[IdRange], latest: Sequence[tuple[str, str, str, str]]
    ) -> None:
        """What a commit acks and records besides its items (inside its transaction)."""
        if ack:
            self._ack(ack)
        if latest:
            self.db.cursor.executemany(sql.PUT_LATEST, latest)

    # -- commit and claim ---------------------------------------------------

    def commit(
        self,
        rows: Sequence[RunRow | ItemRow],
        claim_for: str | None,
        now: float,
        ack: Sequence[IdRange] = (),
        latest: Sequence[tuple[str, str, str, str]] = (),
    ) -> list[WorkItem]:
        """Append every run (one INSERT each: SQLite builds the rows from the
        run's JSON array) and item, claim what may be claimed, ack and record
        latest values. Returns each item as stored and each run's claimed values,
        in order."""
        plan: dict[StreamKey, list[Any]] = {}  # stream -> see _plan_stream
        fresh: list[tuple[StreamKey, int]] = []  # streams first seen here: cached after commit
        done: list[WorkItem | _Taken] = []
        with self.db.write:
            for row in rows:
                stream = row[0].stream
                entry = plan.get(stream) or self._plan_stream(stream, claim_for, now, plan, fresh)
                if len(row) == 2:
                    item, payload = row
                    done.append(self._insert_item(entry, item, payload, claim_for, now))
                else:
                    taken = self._insert_run(entry, row, claim_for, now)
                    if taken is not None:
                        done.append(taken)
            self._ack_and_latest(ack, latest)
        for key, sid in fresh:
            self.streams.remember(key, sid)
        out: list[WorkItem] = []
        for result in done:
            if isinstance(result, WorkItem):
                out.append(result)
            else:
                out += result.items(now)
        return out

    def _next_seqs(self, entry: list[Any], stream: StreamKey, count: int) -> tuple[int, int]:
        """Take ``count`` seqs of ``entry``'s stream: the first one and its id."""
        lo, seq = entry[1], entry[2]
        if seq + count - 1 > sql.MAX_SEQ:  # 22 years at 25,000 items/s; refuse, never wrap
            raise QueueError(f"stream {stream} has run out of sequence numbers")
        entry[2] = seq + count
        return seq, lo + seq

    def _insert_item(
        self, entry: list[Any], item: NewItem, payload: str, claim_for: str | None, now: float
    ) -> WorkItem:
        """Inside :meth:`commit`'s transaction: append one item, claimed if it may be."""
        seq, entry_id = self._next_seqs(entry, item.stream, 1)
        holder: str | None = None
        if entry[3] and item.claim:
            state, holder, deliveries = sql.PENDING, claim_for, 1
        else:
            state, deliveries = sql.READY, 0
            entry[3] = False  # later items of the stream must not overtake this one
        touched = now if holder else None
        row = (entry_id, item.kind, payload, state, None, holder, touched, deliveries, now)
        self.db.cursor.execute(sql.INSERT_ITEM, row)
        return WorkItem(str(entry_id), entry[0], item.kind, item.payload, seq, deliveries, now)

    def _insert_run(
        self, entry: list[Any], row: RunRow, claim_for: str | None, now: float
    ) -> _Taken | None:
        """Inside :meth:`commit`'s transaction: append a run with one INSERT; what
        it claimed, to build once the transaction is over (None: nothing)."""
        run, array, head, tail = row
        count = len(run.values)
        seq, first = self._next_seqs(entry, run.stream, count)
        take = run.claim if entry[3] else 0
        if take < count:
            entry[3] = False  # later items of the stream must not overtake these
        self.db.cursor.execute(sql.INSERT_RUN, (first, array, head, tail, take, claim_for, now))
        return _Taken(run, entry[0], first, seq, take) if take else None

    def _plan_stream(
        self,
        stream: StreamKey,
        claim_for: str | None,
        now: float,
        plan: dict[StreamKey, list[Any]],
        fresh: list[tuple[StreamKey, int]],
    ) -> list[Any]:
        """Where ``stream``'s next items go: [key, first id, next seq, claim at once?]."""
        claiming = claim_for is not None and not self._leased_elsewhere(stream, claim_for, now)
        sid = self.streams.cached_id(stream)
        if sid is None:
            sid = self.streams.new_id(stream)
            fresh.append((StreamKey(stream.flow, stream.node), sid))
        lo = sid << sql.SEQ_BITS
        state = self.db.cursor.execute(sql.STREAM_STATE, (lo, lo | sql.MAX_SEQ, sid)).fetchone()
        next_seq, ready, parked = state
        key = self.streams.cached_key(sid) or StreamKey(stream.flow, stream.node)
        entry = plan[stream] = [key, lo, next_seq, claiming and not ready and not parked]
        return entry

    def _leased_elsewhere(self, stream: StreamKey, consumer: str, now: float) -> bool:
        """Whether another executor holds a live lease on ``stream``: nobody else may
        claim there, or it would read past what the holder was handed back."""
        found = self.db.cursor.execute(
            sql.LEASED_ELSEWHERE, (stream.flow, stream.node, consumer, now)
        ).fetchone()
        return found is not None

    def claim(
        self, consumer: str, plan: Sequence[tuple[StreamKey, int]], now: float
    ) -> list[WorkItem]:
        """Claim per ``plan``."""
        found: list[tuple[StreamKey, int, list[Row]]] = []  # stream, first id, rows
        redelivered = 0
        with self.db.write as cur:
            parked: dict[str, int | None] = dict(cur.execute(sql.PARKED).fetchall())
            for stream, wanted in plan:
                n = wanted
                if stream.flow in parked:
                    n = min(n, parked[stream.flow] or 0)  # steps left, None: none
                    if n <= 0:
                        continue
                sid = self.streams.id_of(stream)
                if sid is None or self._leased_elsewhere(stream, consumer, now):
                    continue
                lo, hi = sql.span(sid)
                rows: list[Row] = cur.execute(sql.CLAIM, (consumer, now, lo, hi, n)).fetchall()
                if not rows:
                    continue
                rows.sort()  # RETURNING order is unspecified; hand out oldest first
                found.append((self.streams.key_of(sid), lo, rows))
                redelivered += sum(row[3] > 1 for row in rows)
                if stream.flow in parked:
                    left = (parked[stream.flow] or 0) - len(rows)
                    parked[stream.flow] = left
                    cur.execute(sql.SET_STEPS, (left or None, stream.flow))
            if redelivered:
                cur.execute(sql.ADD_REDELIVERED, (redelivered,))
        if not found:
            return []
        payloads = iter(decode([row[2] for _, _, rows in found for row in rows]))
        claimed = [
            WorkItem(str(entry), key, kind, next(payloads), entry - lo, deliveries, enqueued_at)
            for key, lo, rows in found
            for entry, kind, _, deliveries, enqueued_at in rows
        ]
        return claimed

    def read_all(self, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return list(self.db.cursor.execute(statement, params).fetchall())

    # -- finishing and holding -----------------------------------------------

    def ack(self, ranges: Sequence[IdRange]) -> int:
        with self.db.write:
            return self._ack(ranges)

    def release_consumer(self, consumer: str) -> int:
        with self.db.write as cur:
            cur.execute(sql.RELEASE_CONSUMER, (consumer,))
            released = cur.rowcount
            cur.execute(sql.DROP_ALL_LEASES_OF, (consumer,))
            cur.execute(sql.DROP_ALL_MEMBERSHIPS_OF, (consumer,))
            return released

    def write_many(self, statement: str, rows: Sequence[tuple[Any, ...]]) -> int:
        """Run ``statement`` once per row in one transaction; return the rows changed."""
        with self.db.write as cur:
            cur.executemany(statement, rows)
            return cur.rowcount

    def reclaim(self, cutoff: float) -> list[WorkItem]:
        with self.db.write as cur:
            rows = cur.execute(sql.RECLAIM_TO_READY, (cutoff,)).fetchall()
        rows.sort()
        return self.streams.items(rows)

    def dead_letter(
        self, ranges: Sequence[IdRange], flow: str, record: str, reason: str, now: float
    ) -> None:
        with self.db.write as cur:
            self._keep_floors(ranges)
            cur.executemany(sql.DELETE_ITEMS, ranges)
            cur.execute(sql.INSERT_DEAD, (flow, record, reason, now))
            cur.execute(sql.ADD_DEAD)

    def dead_letters(self, flow: str | None, limit: int) -> list[DeadLetter]:
        cur = self.db.cursor
        if flow is None:
            rows = cur.execute(sql.DEAD_ALL, (limit,)).fetchall()
        else:
            rows = cur.execute(sql.DEAD_OF_FLOW, (flow, limit)).fetchall()
        return [dead_letter_of_row(row) for row in rows]

    # -- looking at the queue ------------------------------------------------

    def backlog(self) -> dict[StreamKey, StreamBacklog]:
        counts: dict[int, list[int]] = {}
        oldest: dict[int, float] = {}
        with self.db.read as cur:
            for sid, state, n, first_id in cur.execute(sql.BACKLOG).fetchall():
                counts.setdefault(sid, [0, 0])[state] = n
                at = cur.execute(sql.ENQUEUED_AT, (first_id,)).fetchone()[0]
                oldest[sid] = min(at, oldest.get(sid, at))
            return {
                self.streams.key_of(sid): StreamBacklog(ready, pending, 0, oldest[sid])
                for sid, (ready, pending) in counts.items()
            }

    def parked(self) -> dict[str, int | None]:
        return dict(self.db.cursor.execute(sql.PARKED).fetchall())

    def stats(self) -> QueueStats:
        with self.db.read as cur:
            enqueued, acked, dead, redelivered, backlog = cur.execute(sql.STATS).fetchone()
            parked = sorted(flow for flow, _steps in cur.execute(sql.PARKED).fetchall())
            tallies = dict(cur.execute(sql.TALLIES).fetchall())
        extra = {
            "backend": "sqlite",
            "path": str(self.db.path),
            "busy_fallbacks": self.db.busy_fallbacks,
            "requeued": tallies.get("requeued", 0),
        }
        return QueueStats(enqueued, acked, dead, redelivered, backlog, tuple(parked), extra)


def dead_letter_of_row(row: tuple[str, str, float, int]) -> DeadLetter:
    """A dead letter from its row: (item record, reason, dead_at, row id)."""
    record, reason, dead_at, row_id = row
    return DeadLetter(item_of_record(record), reason, dead_at, str(row_id))
