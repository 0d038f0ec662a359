"""The periodic sweep of a long-running process (``run``, ``serve``, ``demo``):
a :class:`~mediaflow.gc.Sweeper` with a queue handle of its own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mediaflow.config import SqliteSync
from mediaflow.engine.events import EventBus
from mediaflow.gc.settings import GcSettings
from mediaflow.gc.sweeper import Sweeper
from mediaflow.queue import Retention, open_queue


class RetentionHandle(Retention, Protocol):
    """A queue handle that garbage collection opened for itself: its retention
    role (the sweep's live digests, trimming, forgetting a flow) and ``close``."""

    async def close(self) -> None:
        """Release connections (see :meth:`mediaflow.queue.WorkQueue.close`)."""
        ...


@dataclass
class PeriodicSweep:
    """A running :class:`~mediaflow.gc.Sweeper` and the queue handle it owns."""

    sweeper: Sweeper
    queue: RetentionHandle

    async def stop(self) -> None:
        """Stop the sweeper (a sweep in progress stops between batches), then close
        its queue."""
        try:
            await self.sweeper.stop()
        finally:
            await self.queue.close()


def start_periodic(
    data_dir: Path,
    queue_url: str | None,
    bus: EventBus,
    settings: GcSettings,
    *,
    sqlite_sync: SqliteSync = "NORMAL",
) -> PeriodicSweep | None:
    """Start sweeping ``data_dir`` every ``settings.interval_s`` (and watching the cap
    when ``settings.max_bytes`` is set); None when both are off. ``sqlite_sync``:
    the SQLite queue's ``synchronous``, as the process's other queue handles have it.

    Synchronous; call it on the running loop. Raises ``QueueError`` if the queue
    cannot be opened. :meth:`PeriodicSweep.stop` before the session or server stops.
    """
    if settings.interval_s == 0 and settings.max_bytes is None:
        return None
    queue = open_queue(queue_url, data_dir, sqlite_sync=sqlite_sync)
    sweeper = Sweeper(data_dir, queue, bus, settings)
    sweeper.start()
    return PeriodicSweep(sweeper, queue)
