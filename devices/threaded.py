"""The consumer half shared by video and audio inputs: a producer thread behind a bridge."""

from __future__ import annotations

import asyncio
import logging
import threading
from abc import ABC, abstractmethod
from typing import Generic, Self, TypeVar

from devices.bridge import FrameBridge, start_producer
from devices.errors import EndOfStream

T = TypeVar("T")
log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 2.0


class ThreadedInput(ABC, Generic[T]):
    """Items produced by ``_produce`` on a thread; consume with ``async for`` or ``read``.

    One consumer task. Use ``async with`` or call :meth:`aclose` so the thread stops and
    the device is released. Subclasses implement ``_produce`` (runs on the thread, must
    release its resources when it returns or raises) and ``_release`` (for an input
    closed before it ever started).
    """

    def __init__(self, spec: str, bridge: FrameBridge[T]) -> None:
        self.spec = spec
        self._bridge = bridge
        self._thread: threading.Thread | None = None
        self._closed = False

    @abstractmethod
    def _produce(self, bridge: FrameBridge[T]) -> None:
        """Read the device into ``bridge`` (runs in the producer thread)."""

    @abstractmethod
    def _release(self) -> None:
        """Close the device (runs once, after the producer stopped)."""

    def start(self) -> None:
        """Start the producer thread (``read`` does it on first use). Never blocks.

        Raises ``RuntimeError`` after :meth:`aclose`.
        """
        if self._closed:
            raise RuntimeError(f"input {self.spec!r} is closed")
        if self._thread is None:
            self._thread = start_producer(self._bridge, self._produce, name=f"input {self.spec}")

    async def read(self) -> T:
        """The next item. Cancellable (nothing is lost).

        Raises :class:`~devices.errors.EndOfStream` when a finite source is done,
        :class:`~devices.errors.DeviceLost` when a live one fails, the source's own error
        otherwise, and :class:`~devices.errors.BridgeClosed` after :meth:`aclose`.
        """
        self.start()
        return await self._bridge.get()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.read()
        except EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def running(self) -> bool:
        """True while the producer thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        """:meth:`aclose` for a thread: blocks up to ``JOIN_TIMEOUT_S``. Never call it
        on the event loop."""
        thread = self._stop()
        if thread is not None:
            thread.join(JOIN_TIMEOUT_S)

    def _stop(self) -> threading.Thread | None:
        """Close the bridge; the producer thread to wait for, or None when there was
        none (then the source is released here)."""
        self._closed = True
        self._bridge.close()
        if self._thread is None:
            self._release()
        return self._thread

    async def aclose(self) -> None:
        """Stop the producer thread and release the source. Idempotent.

        Waits (in a worker thread, so the loop keeps running) up to ``JOIN_TIMEOUT_S``
        for the thread, which stops at its next item or pacing sleep; a source stuck in
        a blocking read is left to its daemon thread, which releases it when the read
        returns.
        """
        thread = self._stop()
        if thread is None:
            return
        await asyncio.to_thread(thread.join, JOIN_TIMEOUT_S)
        if thread.is_alive():
            log.warning("producer for %r still blocked in a read", self.spec)
