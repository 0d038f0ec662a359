"""Sweeps on a timer, and a watcher that holds the store under ``ARTIFACT_MAX_BYTES``.

``mediaflow run``, ``serve`` and ``demo`` each start one. The periodic sweep
runs ``min(60 s, interval)`` after start (so what a crash left is cleaned soon)
and then every ``ARTIFACT_GC_INTERVAL_S``; ``0`` turns it off. With a cap, the
watcher reads the store's byte counter every ``ARTIFACT_CAP_CHECK_S`` and runs
a cap-only pass when it is over; a pass that can evict nothing (live
references hold it all) backs off, up to a minute, and ``store_over_cap`` is
published at most every :data:`OVER_CAP_EVERY_S`. The store may exceed the cap
by what is written between two checks. A pass left over the cap asks
:attr:`Sweeper.give_way`, when set, to let go of that many bytes of references
(an edge box's oldest waiting items), then evicts again.

Sweep errors are logged and published (``gc_failed``); the next tick tries
again. A sweep that finds another process sweeping skips its turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from mediaflow.engine.events import EventBus
from mediaflow.eventloop import run_blocking
from mediaflow.gc.settings import GcSettings, format_bytes
from mediaflow.gc.sweep import SweepBusy, SweepReport, sweep_artifacts
from mediaflow.queue.contract import Retention
from mediaflow.store import ArtifactStore

log = logging.getLogger("mediaflow.gc")

FIRST_SWEEP_S = 60.0
MAX_BACKOFF_S = 60.0

GiveWay = Callable[[int], Awaitable[int]]
"""``give_way(excess_bytes)``: let go of references to about that many bytes of
artifacts; returns how many bytes it let go of."""
OVER_CAP_EVERY_S = 30.0


class Sweeper:
    """Periodic sweeps and the cap watcher of one process. Use from one event loop."""

    def __init__(
        self,
        data_dir: Path,
        queue: Retention,
        bus: EventBus,
        settings: GcSettings,
        *,
        store: ArtifactStore | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.queue = queue
        self.bus = bus
        self.settings = settings
        self._store = store
        self._owns_store = store is None
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()  # one sweep of this process at a time
        self._over_cap_said = float("-inf")
        self.last_report: SweepReport | None = None
        self.give_way: GiveWay | None = None
        """Asked to let go of references when only live ones hold the store over its
        cap (an edge box's forwarder gives up its oldest waiting items)."""

    @property
    def store(self) -> ArtifactStore:
        if self._store is None:
            self._store = ArtifactStore(self.data_dir)
        return self._store

    def start(self) -> None:
        """Start the timers (a no-op for the parts the settings turn off)."""
        if self.settings.interval_s > 0:
            self._tasks.append(asyncio.create_task(self._periodic(), name="gc-periodic"))
        if self.settings.max_bytes is not None:
            self._tasks.append(asyncio.create_task(self._watch_cap(), name="gc-cap"))

    async def stop(self) -> None:
        """Cancel the timers and wait for a sweep in progress to stop between batches."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._owns_store and self._store is not None:
            self._store.close()

    async def sweep_now(self, *, dry_run: bool = False, cap_only: bool = False) -> SweepReport:
        """One sweep now, events published on the bus. Raises as :func:`sweep_artifacts`."""
        loop = asyncio.get_running_loop()

        def sink(event_type: str, data: Mapping[str, Any]) -> None:
            loop.call_soon_threadsafe(self._publish, event_type, dict(data))

        async with self._lock:
            report = await sweep_artifacts(
                self.data_dir,
                self.queue,
                store=self.store,
                settings=self.settings,
                dry_run=dry_run,
                cap_only=cap_only,
                events=sink,
            )
        self.last_report = report
        if not cap_only:
            self.bus.publish("gc_swept", report.to_json())
            log.info(
                "gc: deleted %d (%s), evicted %d, %s stored, %.1f s",
                report.deleted,
                format_bytes(report.freed_bytes),
                report.evicted,
                format_bytes(report.stored_bytes),
                report.duration_s,
            )
        return report

    def _publish(self, event_type: str, data: dict[str, Any]) -> None:
        if event_type == "store_over_cap":
            now = asyncio.get_running_loop().time()
            if now - self._over_cap_said < OVER_CAP_EVERY_S:
                return
            self._over_cap_said = now
            log.warning(
                "store over its cap: %s stored, cap %s, %s held by live references",
                format_bytes(data["stored_bytes"]),
                format_bytes(data["max_bytes"]),
                format_bytes(data["live_bytes"]),
            )
        self.bus.publish(event_type, data)

    async def _periodic(self) -> None:
        await asyncio.sleep(min(FIRST_SWEEP_S, self.settings.interval_s))
        while True:
            await self._guarded(cap_only=False)
            await asyncio.sleep(self.settings.interval_s)

    async def _watch_cap(self) -> None:
        assert self.settings.max_bytes is not None  # start() checks
        pause = self.settings.cap_check_s
        while True:
            await asyncio.sleep(pause)
            stored = await run_blocking(self.store.total_bytes)
            if stored <= self.settings.max_bytes:
                pause = self.settings.cap_check_s
                continue
            report = await self._guarded(cap_only=True)
            if report is not None and report.over_cap and self.give_way is not None:
                excess = report.stored_bytes - self.settings.max_bytes
                if excess > 0 and await self.give_way(excess) > 0:
                    report = await self._guarded(cap_only=True)  # now they can go
            if report is not None and report.over_cap and report.evicted == 0:
                # Nothing could go (live references hold it all): ask less often.
                pause = min(max(pause * 2, self.settings.cap_check_s), MAX_BACKOFF_S)
            else:
                pause = self.settings.cap_check_s

    async def _guarded(self, *, cap_only: bool) -> SweepReport | None:
        try:
            return await self.sweep_now(cap_only=cap_only)
        except SweepBusy:
            log.debug("gc: another process is sweeping %s; skipping this turn", self.data_dir)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("gc: sweep failed: %s", exc, exc_info=True)
            self.bus.publish("gc_failed", {"error": f"{type(exc).__name__}: {exc}"})
        return None
