"""The event bus: what the engine and nodes report, for logs, the server and tests.

Events get increasing integer ids. The bus keeps the last ``history`` events
in a ring so a reader can resume after a reconnect (``Last-Event-ID``).
Publishing never blocks and never waits for readers: each subscriber has a
bounded buffer with the *drop-oldest* policy (a live dashboard wants the
newest events; a reader that falls behind is told how many it missed through
a ``events_dropped`` event rather than slowing the engine down).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mediaflow.media import present_value

log = logging.getLogger("mediaflow.events")

# The event types mediaflow publishes, and their fields: mediaflow.engine.event_types.


class LatestThrottle:
    """Publishes ``latest`` events (the newest value per port, for live views) at
    most ``per_second`` times per port, always ending a burst with its last value;
    a value offered with ``every`` (a text port's: a line, which a view lists rather
    than replaces) is sent at once, never skipped. Each carries the emission's
    identity (``seq``, and ``item`` when the node ran for an item) next to ``value``.

    Call :meth:`offer` on the event loop for every emitted value once it is durable;
    it costs a dict lookup unless an event is due. :meth:`told` is what live views
    have been told so far: the poll shows it, and a new event stream starts with it
    (:mod:`mediaflow.server.sse`), so a view sees each value once whichever way it asks.
    """

    def __init__(self, bus: EventBus, flow: str, per_second: float = 10.0) -> None:
        self._bus = bus
        self._flow = flow
        self._interval = 1.0 / per_second
        self._last_sent: dict[tuple[str, str], float] = {}
        self._pending: dict[tuple[str, str], tuple[Any, Mapping[str, int]]] = {}
        self._told: dict[tuple[str, str], tuple[Any, Mapping[str, int]]] = {}

    def remember(self, values: Mapping[tuple[str, str], Any]) -> None:
        """Values recorded by earlier runs (durable already): told as they are, with
        no identity, until this run sends a newer one."""
        for key, value in values.items():
            self._told[key] = (value, {})

    def told(self) -> dict[tuple[str, str], tuple[Any, Mapping[str, int]]]:
        """Per ``(node, port)``, the encoded value its last ``latest`` event carried and
        that value's identity (or a value of an earlier run): a copy."""
        return dict(self._told)

    def offer(
        self, key: tuple[str, str], value: Any, ident: Mapping[str, int], *, every: bool = False
    ) -> None:
        """Offer the value ``(node, port)`` just emitted (with ``every``: send it now)."""
        pending = self._pending
        if key in pending:  # an event is due later: it will carry the newest value
            pending[key] = (value, ident)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if every:
            self._send(key, (value, ident), now)
            return
        due = self._last_sent.get(key, -1e9) + self._interval
        if now >= due:
            self._send(key, (value, ident), now)
            return
        loop.call_at(due, self._flush, key)
        pending[key] = (value, ident)

    def _flush(self, key: tuple[str, str]) -> None:
        if key in self._pending:
            self._send(key, self._pending.pop(key), asyncio.get_running_loop().time())

    def _send(
        self, key: tuple[str, str], pending: tuple[Any, Mapping[str, int]], now: float
    ) -> None:
        self._last_sent[key] = now
        self._told[key] = pending
        self._bus.publish("latest", latest_data(self._flow, key, *pending), replay=False)


def latest_data(
    flow: str, key: tuple[str, str], value: Any, ident: Mapping[str, int]
) -> dict[str, Any]:
    """The fields of a ``latest`` event: the port, its encoded ``value`` as views show
    it (:func:`~mediaflow.media.present_value`) and the emission's identity."""
    node, port = key
    return {"flow": flow, "node": node, "port": port, "value": present_value(value), **ident}


@dataclass(frozen=True)
class Event:
    id: int
    type: str
    time: float
    data: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "time": self.time, **self.data}


class Subscription:
    """A reader's bounded view of the bus; iterate with ``async for``."""

    def __init__(self, bus: EventBus, maxsize: int, types: frozenset[str] | None) -> None:
        self._bus = bus
        self._buffer: deque[Event] = deque()
        self._maxsize = maxsize
        self._types = types
        self._ready = asyncio.Event()
        self.dropped = 0
        self.closed = False

    def _offer(self, event: Event) -> None:
        if self._types is not None and event.type not in self._types:
            return
        if len(self._buffer) >= self._maxsize:
            self._buffer.popleft()
            self.dropped += 1
        self._buffer.append(event)
        self._ready.set()

    def get_nowait(self) -> Event | None:
        return self._buffer.popleft() if self._buffer else None

    async def get(self, timeout: float | None = None) -> Event | None:
        """The next event, or None after ``timeout`` seconds or once closed."""
        while not self._buffer:
            if self.closed:
                return None
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return None
        return self._buffer.popleft()

    def close(self) -> None:
        self.closed = True
        self._ready.set()
        self._bus._subscribers.discard(self)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        while True:
            event = await self.get()
            if event is None:
                return
            yield event


class EventBus:
    """Publish/subscribe with a replay ring. Not thread-safe: publish from the loop
    (threads use ``loop.call_soon_threadsafe(bus.publish, ...)``)."""

    def __init__(self, history: int = 2000) -> None:
        self._ring: deque[Event] = deque(maxlen=history)
        self._subscribers: set[Subscription] = set()
        self._listeners: list[Callable[[Event], None]] = []
        self._next_id = 1
        self.counts: dict[str, int] = {}

    @property
    def last_id(self) -> int:
        return self._next_id - 1

    def publish(
        self, event_type: str, data: Mapping[str, Any] | None = None, *, replay: bool = True
    ) -> Event:
        """Publish an event. ``replay=False`` keeps it out of the resume ring (for
        frequent, superseded events such as ``latest`` that would push out the
        ones a reconnecting reader needs)."""
        event = Event(self._next_id, event_type, time.time(), data or {})
        self._next_id += 1
        if replay:
            self._ring.append(event)
        self.counts[event_type] = self.counts.get(event_type, 0) + 1
        for subscriber in tuple(self._subscribers):
            subscriber._offer(event)
        for listener in tuple(self._listeners):
            try:
                listener(event)
            except Exception:  # a reader's bug must not stop the engine publishing
                log.exception("event listener %r failed on %s", listener, event.type)
        return event

    def listen(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``listener(event)`` synchronously for every event published from now
        on (it must be quick: it runs inside :meth:`publish`). Returns the function
        that stops it."""
        self._listeners.append(listener)

        def stop() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return stop

    def recent(self, after_id: int = 0, types: frozenset[str] | None = None) -> list[Event]:
        """Events still in the ring with id > ``after_id``."""
        return [e for e in self._ring if e.id > after_id and (types is None or e.type in types)]

    def subscribe(
        self,
        *,
        after_id: int | None = None,
        maxsize: int = 1000,
        types: frozenset[str] | None = None,
    ) -> Subscription:
        """A new subscription; with ``after_id``, ring events after it are replayed first.

        If events after ``after_id`` already left the ring, the subscription starts
        with an ``events_dropped`` event saying how many were lost.
        """
        sub = Subscription(self, maxsize, types)
        if after_id is not None:
            replay = self.recent(after_id)
            oldest = replay[0].id if replay else self._next_id
            missed = oldest - after_id - 1
            if missed > 0:
                sub._buffer.append(
                    Event(0, "events_dropped", time.time(), {"missed": missed, "after": after_id})
                )
            for event in replay:
                sub._offer(event)
        self._subscribers.add(sub)
        return sub
