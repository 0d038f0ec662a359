"""The runner's background loops: claim, commit, touch, reclaim, sample, flush.

Each loop is one coroutine with one job. Queue failures are reported once as
``queue_unavailable`` and retried with a capped backoff; ``queue_available``
follows when the backend answers again. Nothing here decides scheduling: each
loop builds its tick, hands it to the reducer through ``dispatch``, performs
the I/O the answer asks for and dispatches the outcome. What the loops read
of the run (the entries held, whether any stream is ordered) they read from
the reducer's frozen state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

from mediaflow.config import EngineSettings
from mediaflow.engine.commands import ClaimCommand, Dispatch, answer
from mediaflow.engine.effects import QueueHealth
from mediaflow.engine.events import EventBus
from mediaflow.engine.heartbeat import Heartbeat
from mediaflow.engine.journal import Journal
from mediaflow.engine.lease_round import LeaseRound
from mediaflow.engine.queue_roles import EngineQueue
from mediaflow.engine.state import EngineState, held_ids
from mediaflow.engine.stats import LatencyWindow
from mediaflow.engine.ticks import (
    BacklogBehindTick,
    BacklogSampledTick,
    ClaimDueTick,
    ClaimedTick,
    ClaimFailedTick,
)
from mediaflow.queue.contract import QueueError, StreamKey

log = logging.getLogger("mediaflow.engine")

CLAIM_POLL_S: Final = 0.05
# Acks ride with emissions; alone, they wait up to ACK_LINGER_S (or ACK_BATCH
# of them) for company. An ack only frees the queue; delivery is not delayed.
ACK_BATCH: Final = 256
ACK_LINGER_S: Final = 0.002
LATEST_FLUSH_S: Final = 0.5
# How long a stop waits for a claim already sent to come back (a claim fails
# within the queue's own timeouts; this only bounds a queue that hangs).
CLAIM_SETTLE_S: Final = 10.0


class BackgroundLoops:
    """Owns the runner's long-lived tasks; :meth:`stop` cancels them."""

    def __init__(
        self,
        flow: str,
        *,
        dispatch: Dispatch,
        state: Callable[[], EngineState],
        queue: EngineQueue,
        journal: Journal,
        leases: LeaseRound,
        heartbeat: Heartbeat,
        consumer: str,
        settings: EngineSettings,
        bus: EventBus,
        health: QueueHealth,
        latency: LatencyWindow,
        claim_wake: asyncio.Event,
    ) -> None:
        """``state`` returns the reducer's state as it is now (frozen: read only)."""
        self._flow = flow
        self._dispatch = dispatch
        self._state = state
        self._leases = leases
        self._heartbeat = heartbeat
        self._queue = queue
        self._journal = journal
        self._consumer = consumer
        self._settings = settings
        self._bus = bus
        self._health = health
        self._latency = latency
        self._claim_wake = claim_wake
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._claim_settled: asyncio.Future[None] | None = None  # a claim on its way

    def start(self) -> None:
        lease_s = self._settings.lease_ms / 1000
        backlog_s = self._settings.backlog_interval_s
        self._tasks = [
            asyncio.create_task(self._guarded("claim", self.claim_once, 0.0)),
            asyncio.create_task(self._guarded("commit", self.commit_once, 0.0)),
            asyncio.create_task(self._guarded("touch", self.touch_once, lease_s / 3)),
            asyncio.create_task(self._guarded("reclaim", self.reclaim_once, lease_s / 2)),
            asyncio.create_task(self._guarded("backlog", self.sample_backlog_once, backlog_s)),
            asyncio.create_task(
                self._guarded("latest", self._journal.flush_latest, LATEST_FLUSH_S)
            ),
        ]

    async def stop(self) -> None:
        # The flag as well as the cancel: asyncio.wait_for in Python 3.11 can
        # swallow a cancellation that races with its inner wait completing.
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _guarded(
        self, name: str, step: Callable[[], Awaitable[None]], interval_s: float
    ) -> None:
        backoff = 0.25
        while not self._closing:
            try:
                await step()
                if self._health.down:
                    # A step may return without asking the queue (nothing to do):
                    # only an answer from the queue says it is back.
                    await self._queue.parked()
                    self._health.back(name)
                backoff = 0.25
            except QueueError as exc:
                self._health.failed(name, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if interval_s:
                await asyncio.sleep(interval_s)

    async def claim_once(self) -> None:
        """Claim what the reducer admits; when that is nothing, wait for a wake-up
        (local work left on disk, a reclaim, freed room, a step) or, after
        ``CLAIM_POLL_S``, poll every stream for work other processes enqueued."""
        self._claim_wake.clear()  # before asking: a wake-up from now on is kept
        plan = answer(self._dispatch(ClaimDueTick(False)), ClaimCommand)
        if plan is not None and await self._claim(plan.wants):
            return
        try:
            await asyncio.wait_for(self._claim_wake.wait(), CLAIM_POLL_S)
        except TimeoutError:
            plan = answer(self._dispatch(ClaimDueTick(True)), ClaimCommand)
            if plan is not None:
                await self._claim(plan.wants)

    async def _claim(self, wants: Mapping[StreamKey, int]) -> bool:
        settled = asyncio.get_running_loop().create_future()
        self._claim_settled = settled
        try:
            try:
                items = await self._queue.claim(self._consumer, wants)
            except BaseException:
                self._dispatch(ClaimFailedTick())
                raise
            self._dispatch(ClaimedTick(tuple(items)))
        finally:
            self._claim_settled = None
            settled.set_result(None)
        return bool(items)

    async def claim_settled(self) -> None:
        """Wait until a claim on its way to the queue has come back to the reducer.

        A stop must not cut a claim off: the queue may have handed the items
        over already (counted as a delivery), and only the reducer, seeing
        them while stopping, gives them back unstarted. A claim cut off leaves
        them pending here, so whoever runs them next sees a redelivery."""
        settled = self._claim_settled
        if settled is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(settled), CLAIM_SETTLE_S)
        except TimeoutError:
            log.warning(
                "a claim of flow %r did not come back within %.0f s: its items, if any, "
                "go back to the queue once idle for the lease",
                self._flow,
                CLAIM_SETTLE_S,
            )

    async def commit_once(self) -> None:
        """Group commit: emissions at once (readers wait for them), acks alone
        after a short linger so they batch. A new emission ends the linger."""
        journal = self._journal
        if not journal.has_unflushed():
            journal.ready.clear()
            await journal.ready.wait()
            return
        if not journal.has_emissions() and journal.pending_acks() < ACK_BATCH:
            journal.emissions_ready.clear()
            with contextlib.suppress(TimeoutError):  # the linger simply ended
                await asyncio.wait_for(journal.emissions_ready.wait(), ACK_LINGER_S)
        await journal.flush()

    async def touch_once(self) -> None:
        """Keep the claims and leases of this process alive, and the run's record."""
        ids = held_ids(self._state())
        if ids:
            await self._queue.touch(self._consumer, ids)
        if self._state().ordered:
            await self._leases.run()
        await self._heartbeat.beat()

    async def reclaim_once(self) -> None:
        released = await self._queue.reclaim_stale(self._settings.lease_ms)
        if released:
            # Work for them is on disk again: claimed before new work.
            self._dispatch(BacklogBehindTick(frozenset(item.stream for item in released)))

    async def sample_backlog_once(self) -> None:
        self._dispatch(BacklogSampledTick(await self._queue.backlog_flows()))
        summaries = self._latency.take()
        if summaries:
            self._bus.publish(
                "work_latency",
                {
                    "flow": self._flow,
                    "nodes": {node: s.to_json() for node, s in summaries.items()},
                },
            )
