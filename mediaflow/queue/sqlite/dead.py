"""The SQLite queue's dead letters as an operator handles them: read one, put
its item back to run again, or discard it.

Answers :meth:`WorkQueue.dead_letter_of
<mediaflow.queue.contract.WorkQueue.dead_letter_of>`,
:meth:`~mediaflow.queue.contract.WorkQueue.requeue_dead_letter` and
:meth:`~mediaflow.queue.contract.WorkQueue.delete_dead_letter` for
:class:`~mediaflow.queue.sqlite.SqliteQueue` (dead-lettering itself and the
newest-first listing are in :mod:`mediaflow.queue.sqlite.tx`). A dead letter's
id is its row id in decimal (see :func:`~mediaflow.queue.sqlite.rows.dead_row_id`);
each function is one transaction, run through :meth:`SqliteDb.run
<mediaflow.queue.sqlite.db.SqliteDb.run>` like those of :mod:`.tx`.
"""

from __future__ import annotations

from mediaflow.queue.contract import DeadLetter, WorkItem
from mediaflow.queue.records import dumps, item_of_record
from mediaflow.queue.sqlite import schema as sql
from mediaflow.queue.sqlite.tx import Transactions, dead_letter_of_row


def dead_letter_of(tx: Transactions, flow: str, row_id: int) -> DeadLetter | None:
    """``flow``'s dead letter in row ``row_id``, None if ``flow`` has none there."""
    row = tx.db.cursor.execute(sql.DEAD_BY_ID, (row_id, flow)).fetchone()
    return None if row is None else dead_letter_of_row(row)


def requeue(tx: Transactions, flow: str, row_id: int, now: float) -> WorkItem | None:
    """Move the item of ``flow``'s dead letter ``row_id`` to the end of its
    stream, ready, keeping its deliveries, and delete the dead letter; return
    the item as stored, None (nothing written) if ``flow`` has no such dead
    letter. One write transaction, so a snapshot read (garbage collection's)
    sees the item's references in exactly one of the two places."""
    with tx.db.write as cur:
        row = cur.execute(sql.DEAD_BY_ID, (row_id, flow)).fetchone()
        if row is None:
            return None
        item = item_of_record(row[0])
        # The record holds the payload as json decoded it from dumps' text:
        # encoding it again gives that text back exactly.
        payload = dumps(item.payload)
        key, entry, seq = tx.append_ready(item, payload, now)
        cur.execute(sql.DELETE_DEAD, (row_id, flow))
        cur.execute(sql.ADD_TALLY, ("requeued", 1))
    return WorkItem(str(entry), key, item.kind, item.payload, seq, item.deliveries, now)


def delete(tx: Transactions, flow: str, row_id: int) -> bool:
    """Delete ``flow``'s dead letter ``row_id``; whether there was one."""
    with tx.db.write as cur:
        cur.execute(sql.DELETE_DEAD, (row_id, flow))
        return cur.rowcount > 0
