"""Saving and emitting what a connector captured: one emitter per output port.

Every emitted artifact carries the capture facts DESIGN.md fixes in its meta:
``source`` (the node id), ``device`` (the spec it was opened from), ``seq`` (per port,
gap-free, continued after a crash-resume), ``pts``, ``captured_at`` and what the
media needs (``width``/``height``/``codec``, ``rate``/``channels``, ``duration``);
the first item after a gap adds ``discontinuity``/``gap_s`` (see
:mod:`connectors._timeline`). Bytes are saved with ``ctx.save_artifact``, which hops
to a thread for the write: the context does not expose the store, and the hop costs
far less than the encoding that produced the bytes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from connectors._timeline import Epoch, PortSequence, Resume
from connectors._together import run_together
from devices import EndOfStream
from mediaflow import Context, MediaRef

OutT = TypeVar("OutT")
OutT_co = TypeVar("OutT_co", covariant=True)

REPORT_INTERVAL_S = 1.0


class PortEmitter:
    """Saves bytes with the capture meta and emits the reference on one port."""

    def __init__(self, ctx: Context, port: str, device: str, resume: Resume | None) -> None:
        self.ctx = ctx
        self.port = port
        self.device = device
        self.sequence = PortSequence(port, resume)
        self.emitted = 0

    async def emit(
        self, data: bytes, media_type: str, epoch: Epoch, facts: Mapping[str, Any]
    ) -> MediaRef:
        """Save ``data`` and emit its reference; returns once the emission is durable.

        ``facts`` are the item's own meta (``pts`` already in source time). Raises what
        ``ctx.save_artifact`` and ``ctx.emit`` raise.
        """
        ref = await self.save(data, media_type, epoch, facts)
        await self.publish(ref)
        return ref

    def save(
        self, data: bytes, media_type: str, epoch: Epoch, facts: Mapping[str, Any]
    ) -> Awaitable[MediaRef]:
        """Stamp the next ``seq`` now and return the save to await: saves started in
        order may run at once; :meth:`publish` their references in that order."""
        meta = {"source": self.ctx.node, "device": self.device, **self.sequence.stamp(epoch)}
        meta.update(facts)
        return self.ctx.save_artifact(data, media_type, meta)

    async def publish(self, ref: MediaRef) -> None:
        """Emit a saved reference on the port (durable when it returns)."""
        await self.ctx.emit(self.port, ref)
        self.emitted += 1


class Results(Protocol[OutT_co]):
    """Where finished media comes from, in order: an :class:`EncodeLane`, or a
    :class:`~devices.FrameBridge` a thread fills. ``get`` raises ``EndOfStream`` at the end."""

    async def get(self) -> OutT_co: ...


async def emit_lane(
    lane: Results[OutT],
    save: Callable[[OutT], Awaitable[MediaRef]],
    publish: Callable[[MediaRef], Awaitable[object]],
    *,
    ahead: int = 0,
) -> None:
    """Save and publish every result of ``lane``, in order, until it ends. Raises the
    worker's error, or a save's or an emit's.

    Up to ``ahead`` saves start while an earlier one is still being written: one
    slow fsync then delays its neighbours' publication, not their writes, and
    concurrent fsyncs share the filesystem's journal commits."""
    if ahead <= 0:
        while True:
            try:
                result = await lane.get()
            except EndOfStream:
                return
            await publish(await save(result))
    started: asyncio.Queue[asyncio.Future[MediaRef] | None] = asyncio.Queue(ahead)

    async def start() -> None:
        while True:
            try:
                result = await lane.get()
            except EndOfStream:
                await started.put(None)
                return
            await started.put(asyncio.ensure_future(save(result)))

    async def finish() -> None:
        try:
            while (saving := await started.get()) is not None:
                await publish(await saving)
        finally:
            while not started.empty():  # a failure: saves nobody will publish
                left = started.get_nowait()
                if left is not None:
                    left.cancel()

    await run_together(start(), finish())


class CounterReport:
    """Publishes ``event_type`` when counters grew, at most once per ``interval_s``.

    A camera that cannot keep up skips frames many times a second; one event a second
    with running totals tells the story without flooding the bus.
    """

    def __init__(
        self,
        ctx: Context,
        event_type: str,
        device: str,
        interval_s: float = REPORT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ctx = ctx
        self.event_type = event_type
        self.device = device
        self.interval_s = interval_s
        self._clock = clock
        self._reported: dict[str, int] = {}
        self._last_at: float | None = None

    def update(self, counters: Mapping[str, int], *, force: bool = False) -> bool:
        """Report ``counters`` (running totals) if any grew and the interval passed (or
        ``force``). Returns True when an event was published."""
        total = sum(counters.values())
        if total <= sum(self._reported.values()):
            return False
        now = self._clock()
        if not force and self._last_at is not None and now - self._last_at < self.interval_s:
            return False
        new = total - sum(self._reported.values())
        self.ctx.more.publish(self.event_type, device=self.device, total=total, new=new, **counters)
        self._reported = dict(counters)
        self._last_at = now
        return True
