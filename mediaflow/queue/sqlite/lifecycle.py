"""The SQLite queue's storage lifecycle: what a long-running flow leaves behind.

Answers :meth:`WorkQueue.trim_dead_letters
<mediaflow.queue.contract.WorkQueue.trim_dead_letters>` and
:meth:`~mediaflow.queue.contract.WorkQueue.forget_flow` for
:class:`~mediaflow.queue.sqlite.SqliteQueue` (the digests the queue still
references are read by :mod:`mediaflow.queue.sqlite.live`). Each function
below that takes a :class:`SqliteDb` and no ``await`` is one transaction, run
through :meth:`SqliteDb.run` like those of :mod:`mediaflow.queue.sqlite.tx`.
"""

from __future__ import annotations

import asyncio
from typing import Final

from mediaflow.queue.contract import QueueError
from mediaflow.queue.sqlite import schema as sql
from mediaflow.queue.sqlite.db import SqliteDb

# Dead letters deleted per transaction by trim_dead_letters: each runs inline
# on the loop thread, so a large trim is many short transactions, not one long one.
TRIM_CHUNK: Final = 2000


async def trim_dead_letters(db: SqliteDb, *, before: float, keep_per_flow: int) -> int:
    """Delete dead letters older than ``before`` or beyond the newest
    ``keep_per_flow`` of their flow, in transactions of at most
    :data:`TRIM_CHUNK` rows, yielding to the loop between them; return how many
    went. Raises ``ValueError`` for a negative ``keep_per_flow``."""
    if keep_per_flow < 0:
        raise ValueError(f"keep_per_flow must be at least 0, not {keep_per_flow}")
    deleted = 0
    while True:
        n = await db.run(trim_dead, db, before, keep_per_flow, TRIM_CHUNK)
        deleted += n
        if n < TRIM_CHUNK:
            return deleted
        await asyncio.sleep(0)


def trim_dead(db: SqliteDb, before: float, keep_per_flow: int, limit: int) -> int:
    """Delete up to ``limit`` dead letters older than ``before`` or beyond the
    newest ``keep_per_flow`` of their flow; the caller repeats while it gets
    ``limit`` (each call is one short transaction)."""
    with db.write as cur:
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


def forget_flow(db: SqliteDb, flow: str) -> dict[str, int]:
    """Drop ``flow``'s latest values and dead letters, in one transaction (the
    check and the deletions see the same file). Raises :class:`QueueError` if
    items of it are waiting."""
    with db.write as cur:
        waiting = 0
        for (sid,) in cur.execute(sql.STREAMS_OF_FLOW, (flow,)).fetchall():
            waiting += cur.execute(sql.COUNT_IN_RANGE, sql.span(sid)).fetchone()[0]
        if waiting:
            raise QueueError(
                f"flow {flow!r} still has {waiting} item(s) waiting in the queue; "
                "forget it once they have been consumed or dead-lettered"
            )
        cur.execute(sql.FORGET_LATEST, (flow,))
        latest = cur.rowcount
        cur.execute(sql.FORGET_DEAD, (flow,))
        return {"latest": latest, "dead_letters": cur.rowcount}
