"""A bounded hand-off from one producer thread to one asyncio consumer.

Device reads block (a camera waits for the next frame, a decoder chews through a
file), so each source runs in its own thread and hands items to the event loop through
a :class:`FrameBridge`. The bridge is always bounded: an unbounded queue behind a slow
consumer is a memory leak with a delay. What happens when it is full is a named policy:

- ``"block"``: the producer waits for room (backpressure, lossless). Files and virtual
  sources use it: they can simply read more slowly.
- ``"drop_oldest"``: the oldest buffered item is discarded and counted in ``dropped``.
  Live devices use it: a camera cannot be paused, and the freshest frame matters most.
- ``"fail"``: the producer gets :class:`~devices.errors.BridgeOverflow`.

Three outcomes reach the consumer and stay distinct: an item, the end of the stream
(:class:`~devices.errors.EndOfStream`, or the end of ``async for``), and the producer's
exception, raised as-is in the consumer once the items before it are drained. The
consumer closing the bridge makes the producer's next ``put`` raise
:class:`~devices.errors.BridgeClosed`, so the thread stops at its next item.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from devices.errors import BridgeClosed, BridgeOverflow, EndOfStream

T = TypeVar("T")
Policy = Literal["block", "drop_oldest", "fail"]
POLICIES: tuple[Policy, ...] = ("block", "drop_oldest", "fail")


@dataclass(frozen=True)
class BridgeStatistics:
    """A snapshot of a bridge: what is buffered, lost and waiting."""

    buffered: int
    maxsize: int
    dropped: int
    waiting: int  # producer threads blocked for room (policy "block")
    waiting_consumers: int
    policy: Policy
    finished: bool  # the producer signalled the end or an error
    closed: bool  # the consumer closed the bridge


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class FrameBridge(Generic[T]):
    """Bounded single-producer (thread), single-consumer (asyncio task) channel."""

    def __init__(self, maxsize: int, policy: Policy = "block") -> None:
        """Raises ``ValueError`` for ``maxsize < 1`` or an unknown policy."""
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        self.maxsize = maxsize
        self.policy: Policy = policy
        self._buffer: deque[T] = deque()
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._closed_event = threading.Event()
        self._closed = False
        self._terminal: BaseException | None = None
        self._finished = False  # the producer signalled the end or an error
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        self._dropped = 0
        self._waiting_producers = 0

    # -- producer side: any thread, blocking ---------------------------------------------

    def put(self, item: T, timeout: float | None = None) -> None:
        """Offer ``item``; blocks only under policy ``"block"`` while the buffer is full.

        Never call it with policy ``"block"`` from the consumer's event-loop thread.
        Raises :class:`BridgeClosed` once the consumer closed the bridge,
        :class:`BridgeOverflow` when full under policy ``"fail"``, ``TimeoutError`` when
        ``timeout`` seconds pass without room, ``RuntimeError`` after finish/fail.
        """
        with self._lock:
            self._check_open_locked()
            while len(self._buffer) >= self.maxsize:
                if self.policy == "drop_oldest":
                    self._buffer.popleft()
                    self._dropped += 1
                elif self.policy == "fail":
                    raise BridgeOverflow(f"bridge full ({self.maxsize} items)")
                else:
                    self._waiting_producers += 1
                    try:
                        has_room = self._not_full.wait(timeout)
                    finally:
                        self._waiting_producers -= 1
                    self._check_open_locked()
                    if not has_room:
                        raise TimeoutError(f"no room in bridge after {timeout} s")
            self._buffer.append(item)
            self._wake_consumer_locked()

    def finish(self) -> None:
        """Signal the end of the stream; the consumer drains, then sees ``EndOfStream``."""
        self._terminate(EndOfStream("end of stream"))

    def fail(self, exc: BaseException) -> None:
        """Deliver ``exc`` to the consumer after the items already buffered."""
        self._terminate(exc)

    def wait_closed(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early when the consumer closes.

        Producers pace themselves with it so a close is honoured mid-sleep. Returns
        True when the bridge is closed.
        """
        return self._closed_event.wait(max(0.0, timeout))

    @property
    def closed(self) -> bool:
        """True once the consumer closed the bridge."""
        return self._closed

    # -- consumer side: the event loop ---------------------------------------------------

    async def get(self) -> T:
        """Wait for the next item. Cancellable (nothing is lost when cancelled).

        Raises :class:`EndOfStream` after the producer finished and the buffer is empty,
        the producer's exception after it failed and the buffer is empty,
        :class:`BridgeClosed` once this side closed it, ``RuntimeError`` when another
        task is already waiting.
        """
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._closed:
                    raise BridgeClosed("bridge closed by its consumer")
                if self._buffer:
                    item = self._buffer.popleft()
                    self._not_full.notify()
                    return item
                if self._terminal is not None:
                    raise self._terminal
                if self._waiter is not None:
                    raise RuntimeError("FrameBridge supports one waiting consumer")
                fut: asyncio.Future[None] = loop.create_future()
                self._waiter = (loop, fut)
            try:
                await fut
            finally:
                with self._lock:
                    if self._waiter is not None and self._waiter[1] is fut:
                        self._waiter = None

    def close(self) -> None:
        """Close from the consumer side: drop buffered items, stop the producer.

        Never blocks. Idempotent. A blocked ``put`` wakes and raises ``BridgeClosed``.
        The producer's outcome is forgotten: once ``get`` raised it, its traceback holds
        ``get``'s frame and so this bridge, a cycle only the cyclic GC would free, with
        the source behind it (a decoder, a resampler graph and its threads).
        """
        with self._lock:
            self._closed = True
            self._buffer.clear()
            self._terminal = None
            self._not_full.notify_all()
            self._wake_consumer_locked()
        self._closed_event.set()

    def statistics(self) -> BridgeStatistics:
        """A consistent snapshot; never blocks for long (one short lock)."""
        with self._lock:
            return BridgeStatistics(
                buffered=len(self._buffer),
                maxsize=self.maxsize,
                dropped=self._dropped,
                waiting=self._waiting_producers,
                waiting_consumers=0 if self._waiter is None else 1,
                policy=self.policy,
                finished=self._finished,
                closed=self._closed,
            )

    def __aiter__(self) -> FrameBridge[T]:
        return self

    async def __anext__(self) -> T:
        """The next item; the end of the stream ends the loop, errors propagate."""
        try:
            return await self.get()
        except EndOfStream:
            raise StopAsyncIteration from None

    # -- internals ------------------------------------------------------------------------

    def _check_open_locked(self) -> None:
        if self._closed:
            raise BridgeClosed("bridge closed by its consumer")
        if self._finished:
            raise RuntimeError("put after finish() or fail()")

    def _terminate(self, exc: BaseException) -> None:
        with self._lock:
            if not self._finished:
                self._finished = True
                # A closed bridge raises nothing more: keeping ``exc`` (its traceback
                # holds the producer's frames, and so this bridge) would only make a cycle.
                self._terminal = None if self._closed else exc
            self._wake_consumer_locked()

    def _wake_consumer_locked(self) -> None:
        if self._waiter is None:
            return
        loop, fut = self._waiter
        self._waiter = None
        try:
            loop.call_soon_threadsafe(_resolve, fut)
        except RuntimeError:
            # The consumer's loop is closed: nobody will ever read again.
            self._closed = True
            self._closed_event.set()
            self._not_full.notify_all()


def start_producer(
    bridge: FrameBridge[T], produce: Callable[[FrameBridge[T]], None], *, name: str
) -> threading.Thread:
    """Run ``produce(bridge)`` in a daemon thread and route its outcome into the bridge.

    A normal return finishes the stream; an exception is delivered to the consumer via
    :meth:`FrameBridge.fail`; :class:`BridgeClosed` (the consumer left) ends the thread
    quietly, since nobody is left to tell. Returns the started thread (join it after
    ``bridge.close()``; a daemon so a device stuck in a read never blocks exit).
    """

    def run() -> None:
        try:
            produce(bridge)
        except BridgeClosed:
            return
        except BaseException as exc:  # delivered, not swallowed: the consumer raises it
            bridge.fail(exc)
        else:
            bridge.finish()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
