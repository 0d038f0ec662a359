"""The effect side of leases: one round trip to the queue per heartbeat.

The reducer decides (:mod:`.leasing`); a :class:`LeaseRound` turns the last
lease table into a ``LeaseDueTick``, performs the ``LeaseCommand`` it gets
back (committing buffered acks first when it gives a stream up, so the next
holder never runs again what this process finished) and reports the new
table as a ``LeasedTick``. Leases no round renewed within ``ttl_ms`` (by this
process's clock, from when the renewal was sent) are given up on the spot, so a
process cut off from the queue stops running streams another may hold by now.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from mediaflow.engine.commands import Command, LeaseCommand
from mediaflow.engine.ticks import LeasedTick, LeaseDueTick, Tick
from mediaflow.queue.contract import Leases, LeaseTable, QueueError

log = logging.getLogger("mediaflow.engine")


class LeaseRound:
    def __init__(
        self,
        *,
        queue: Leases,
        flow: str,
        consumer: str,
        ttl_ms: int,
        dispatch: Callable[[Tick], list[Command]],
        commit: Callable[[], Awaitable[None]],
    ) -> None:
        self._queue = queue
        self._flow = flow
        self._me = consumer
        self._ttl_ms = ttl_ms
        self._dispatch = dispatch
        self._commit = commit
        self.table = LeaseTable()
        self._expiry: asyncio.TimerHandle | None = None
        self._lapses = 0  # times _expired gave the leases up

    def due(self) -> LeaseDueTick:
        """The tick for the table as the last round left it."""
        table, me = self.table, self._me
        members = table.members
        return LeaseDueTick(
            table.held_by(me),
            frozenset(s for s, holder in table.holders.items() if holder != me),
            members.index(me) if me in members else len(members),
            len(members) + (me not in members),
        )

    async def run(self) -> None:
        """One round: renew, take and hand over leases as the reducer says."""
        for answer in self._dispatch(self.due()):
            if isinstance(answer, LeaseCommand):
                if answer.release:
                    await self._commit()
                sent, lapses = asyncio.get_running_loop().time(), self._lapses
                self.table = await self._queue.lease(
                    self._flow,
                    self._me,
                    ttl_ms=self._ttl_ms,
                    hold=answer.hold,
                    acquire=answer.acquire,
                    release=answer.release,
                )
                if self._lapses != lapses:
                    # Given up while this call was on its way (_expired): the lines
                    # are dropped, so take the streams afresh next round, which
                    # hands back the items dropped, rather than hold them now.
                    self.table = _without(self.table, self._me)
                    return
                self._watch_expiry(sent)
                self._dispatch(LeasedTick(self.table.held_by(self._me), self.table.taken_over))

    def _watch_expiry(self, sent: float) -> None:
        """Leases last ``ttl_ms`` from when the queue got the call, so at least
        until ``sent`` plus that: unless a later round renews them first, give
        them up then (:meth:`_expired`), whether or not the queue answers."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if self.table.held_by(self._me):
            loop = asyncio.get_running_loop()
            self._expiry = loop.call_at(sent + self._ttl_ms / 1000, self._expired)

    def _expired(self) -> None:
        """No round renewed the leases in time (the queue was unreachable, or the
        event loop stalled): another executor may hold them now, so this one stops
        running their streams (a ``LeasedTick`` holding nothing) and asks for
        streams afresh in its next round."""
        self._expiry = None
        self._lapses += 1
        lapsed = sorted(s.node for s in self.table.held_by(self._me))
        log.warning("leases of flow %r on %s lapsed unrenewed", self._flow, ", ".join(lapsed))
        self.table = _without(self.table, self._me)
        self._dispatch(LeasedTick(frozenset()))

    async def leave(self) -> None:
        """Give every lease back and leave the flow's members (a clean stop)."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        try:
            await self._queue.lease(self._flow, self._me, ttl_ms=0, leave=True)
        except QueueError as exc:  # they lapse on their own
            log.warning("could not hand back the leases of flow %r: %s", self._flow, exc)


def _without(table: LeaseTable, consumer: str) -> LeaseTable:
    """``table`` as if ``consumer`` held nothing."""
    holders = {s: h for s, h in table.holders.items() if h != consumer}
    return LeaseTable(holders, table.members)
