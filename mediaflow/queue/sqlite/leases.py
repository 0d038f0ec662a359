"""The SQLite queue's leases: executors of one flow sharing its ordered streams.

Answers :meth:`WorkQueue.lease <mediaflow.queue.contract.WorkQueue.lease>`
for :class:`~mediaflow.queue.sqlite.SqliteQueue`: processes on one machine
that open the same queue file (``mediaflow run`` and ``mediaflow worker``
with one ``--data``). Leases and memberships are rows with an expiry in
Unix seconds; this host's clock is the backend's clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from mediaflow.queue.contract import LeaseTable, StreamKey
from mediaflow.queue.sqlite import schema as sql
from mediaflow.queue.sqlite.tx import Transactions


def lease(
    tx: Transactions,
    flow: str,
    consumer: str,
    now: float,
    ttl_s: float,
    hold: Sequence[StreamKey],
    acquire: Sequence[StreamKey],
    release: Sequence[StreamKey],
    leave: bool,
) -> LeaseTable:
    """One transaction of :meth:`WorkQueue.lease`."""
    until = now + ttl_s
    taken: set[StreamKey] = set()
    with tx.db.write as cur:
        if leave:
            cur.execute(sql.LEAVE_MEMBER, (flow, consumer))
            cur.execute(sql.DROP_LEASES_OF, (flow, consumer))
        else:
            cur.execute(sql.JOIN_MEMBER, (flow, consumer, until))
            for stream in hold:
                cur.execute(sql.RENEW_LEASE, (until, flow, stream.node, consumer, now))
            for stream in acquire:
                cur.execute(sql.TAKE_LEASE, (flow, stream.node, consumer, until, now))
                if cur.rowcount:
                    taken.add(stream)
        for stream in release:
            cur.execute(sql.DROP_LEASE, (flow, stream.node, consumer))
        for stream in sorted(taken):
            span = tx.streams.span(stream)
            if span is not None:
                cur.execute(sql.HAND_BACK, span)
                if not cur.rowcount:
                    taken.discard(stream)
            else:
                taken.discard(stream)
        holders = {
            StreamKey(flow, node): holder
            for node, holder in cur.execute(sql.LIVE_LEASES, (flow, now)).fetchall()
        }
        members = tuple(row[0] for row in cur.execute(sql.LIVE_MEMBERS, (flow, now)).fetchall())
    return LeaseTable(holders, members, frozenset(taken))
