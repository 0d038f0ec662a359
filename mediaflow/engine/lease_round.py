"""The effect side of leases: one round trip to the queue per heartbeat.

The reducer decides (:mod:`.leasing`); a :class:`LeaseRound` turns the last
lease table into a ``LeaseDueTick``, performs the ``LeaseCommand`` it gets
back (committing buffered acks first when it gives a stream up, so the next
holder never runs again what this process finished) and reports the new
table as a ``LeasedTick``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from mediaflow.engine.commands import Command, LeaseCommand
from mediaflow.engine.ticks import LeasedTick, LeaseDueTick, Tick
from mediaflow.queue.contract import LeaseTable, QueueError, WorkQueue

log = logging.getLogger("mediaflow.engine")


class LeaseRound:
    def __init__(
        self,
        *,
        queue: WorkQueue,
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
                self.table = await self._queue.lease(
                    self._flow,
                    self._me,
                    ttl_ms=self._ttl_ms,
                    hold=answer.hold,
                    acquire=answer.acquire,
                    release=answer.release,
                )
                self._dispatch(LeasedTick(self.table.held_by(self._me), self.table.taken_over))

    async def leave(self) -> None:
        """Give every lease back and leave the flow's members (a clean stop)."""
        try:
            await self._queue.lease(self._flow, self._me, ttl_ms=0, leave=True)
        except QueueError as exc:  # they lapse on their own
            log.warning("could not hand back the leases of flow %r: %s", self._flow, exc)
