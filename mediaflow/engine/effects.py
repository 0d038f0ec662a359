"""Effects in flight: the queue calls the reducer asks for and nobody waits on.

``DeadLetterCommand`` and ``ReleaseCommand`` run in the background, each a
task :class:`Effects` keeps until it ends; a stop or a reload waits for all of
them (:meth:`Effects.settle`), so what was handed back is back before anyone
sweeps. A queue outage met here is reported with the loops'
(:class:`QueueHealth`): the items wait out their lease and come back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from mediaflow.engine.events import EventBus
from mediaflow.queue.contract import Delivery, QueueError, WorkItem

log = logging.getLogger("mediaflow.engine")


class QueueHealth:
    """Reports a queue outage once (``queue_unavailable``), whichever loop or
    effect meets it first, and its end once (``queue_available``)."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self.down = False

    def failed(self, where: str, exc: Exception) -> None:
        if not self.down:
            self.down = True
            log.error("work queue unavailable (%s): %s", where, exc)
            self._bus.publish("queue_unavailable", {"loop": where, "error": str(exc)})

    def back(self, where: str) -> None:
        if self.down:  # another loop may have said so meanwhile
            self.down = False
            self._bus.publish("queue_available", {"loop": where})


class Effects:
    """The background queue calls of one runner."""

    def __init__(self, queue: Delivery, health: QueueHealth) -> None:
        self._queue = queue
        self._health = health
        self._tasks: set[asyncio.Task[Any]] = set()
        self._dead_letters = asyncio.Lock()

    def __bool__(self) -> bool:
        """Whether an effect is still in flight."""
        return bool(self._tasks)

    def dead_letter(self, item: WorkItem, reason: str) -> None:
        self._spawn(self._dead_letter(item, reason))

    def release(self, entry_ids: tuple[str, ...], *, started: bool) -> None:
        self._spawn(self._queue.release(list(entry_ids), started=started))

    async def settle(self) -> None:
        """Wait until no effect is in flight (effects may start others meanwhile)."""
        while self._tasks:
            await asyncio.gather(*tuple(self._tasks), return_exceptions=True)

    async def _dead_letter(self, item: WorkItem, reason: str) -> None:
        # One at a time, in the order decided: dead letters read back newest
        # first must be in the order the items died.
        async with self._dead_letters:
            await self._queue.dead_letter(item, reason)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run an effect in the background, keeping a reference and logging failures."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, QueueError):
            # Its items wait out their lease and come back; the outage is
            # reported once, with the loops'.
            self._health.failed("effect", exc)
        elif exc is not None:
            log.error("engine effect failed: %r", exc)
