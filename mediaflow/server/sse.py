"""``GET /api/events``: the event bus as server-sent events.

Each event goes out as ``id: <bus id>``, ``event: <type>`` and one ``data:``
line of JSON (``Event.to_json()``). A client that reconnects sends
``Last-Event-ID`` (browsers do it themselves) and gets every event after it
that is still in the bus's ring, then live ones; events that already left
the ring are announced by an ``events_dropped`` event (``missed``, ``after``).
``?types=a,b`` keeps only those types, each a type of the registry
(:data:`~mediaflow.engine.event_types.EVENT_TYPES`) or one already published
on this server's bus (a node's own, ``ctx.more.publish``): any other is refused
with a 400 that names it and the registry's types, so a misspelt filter does
not wait in silence for events that never come. ``?after=N`` is ``Last-Event-ID`` for
clients that cannot set headers. A reader let in by a wall link
(:mod:`.links`) gets only the events of the link's flow.

``latest`` events are not replayed (they are superseded too fast to keep); a
stream that takes them starts with one per port of each flow running here, the
value its last ``latest`` event carried, then the live ones: a reader, new or
reconnected, knows every port's value, and gets each value once. Those first
events carry the id the stream resumes after (``Last-Event-ID``, else the bus's
last), so a reader that drops right after them resumes where it would have.

Backpressure: the bus never waits for a reader. Each connection reads from a
bounded subscription (drop-oldest); a reader slower than the engine loses
the oldest events and is told so with ``events_dropped``. A comment line
(``: heartbeat``) goes out after ``heartbeat_s`` of silence so idle proxies
and browsers keep the connection.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from aiohttp import web

from mediaflow.engine.event_types import EVENT_TYPES
from mediaflow.engine.events import Event, EventBus, Subscription, latest_data
from mediaflow.server.artifacts import error
from mediaflow.server.links import SCOPE
from mediaflow.server.state import STATE, AppState

SUBSCRIPTION_SIZE = 1000
MAX_TYPES = 64
_TYPE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
SUBSCRIPTIONS = web.AppKey("mediaflow_sse", set[Subscription])


def format_event(event: Event) -> bytes:
    """One SSE message. The synthetic ``events_dropped`` (id 0) carries no id, so a
    client's Last-Event-ID stays at the last real event."""
    # The event's own id, type and time win over payload keys of the same name (a dead
    # letter's "id" once passed for the event's id).
    envelope = {"id": event.id, "type": event.type, "time": event.time}
    data = json.dumps({**event.to_json(), **envelope}, separators=(",", ":"), default=str)
    head = f"id: {event.id}\n" if event.id > 0 else ""
    return f"{head}event: {event.type}\ndata: {data}\n\n".encode()


def _parse_types(raw: str | None) -> frozenset[str] | None:
    if raw is None or not raw.strip():
        return None
    types = frozenset(t.strip() for t in raw.split(",") if t.strip())
    if len(types) > MAX_TYPES or not all(_TYPE_RE.fullmatch(t) for t in types):
        raise ValueError("types must be a comma-separated list of event type names")
    return types


def _check_known(types: frozenset[str] | None, bus: EventBus) -> None:
    """Raise ``ValueError`` naming the types of ``types`` neither in the registry nor
    published on ``bus`` so far, and the registry's types."""
    unknown = sorted((types or frozenset()) - EVENT_TYPES.keys() - bus.counts.keys())
    if unknown:
        names = ", ".join(unknown)
        raise ValueError(
            f"unknown event type{'s' if len(unknown) > 1 else ''}: {names}. mediaflow's types "
            f"are {', '.join(EVENT_TYPES)}; a node's own type is known once it was published"
        )


def _parse_after(raw: str | None) -> int | None:
    if raw is None or not raw.strip():
        return None
    value = raw.strip()
    if not value.isdigit() or len(value) > 18:
        raise ValueError("Last-Event-ID must be a non-negative integer")
    return int(value)


async def stream_events(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        types = _parse_types(request.query.get("types"))
        _check_known(types, state.bus)
        after = _parse_after(request.headers.get("Last-Event-ID") or request.query.get("after"))
    except ValueError as exc:
        return error(400, str(exc))
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    if request.method == "HEAD":
        # RFC 9110 9.3.2: the GET's headers, no content. aiohttp frames a HEAD answer
        # without a body, so a stream written to it would corrupt the connection.
        await response.prepare(request)
        return response
    scope = request.get(SCOPE)  # a wall link's reader: its flow's events only
    flow = None if scope is None else scope.flow
    resume_at = state.bus.last_id if after is None else after
    subscription = state.bus.subscribe(after_id=after, maxsize=SUBSCRIPTION_SIZE, types=types)
    told = _told(state, types, flow, resume_at)  # in the subscription's turn: nothing between
    subscriptions = request.app[SUBSCRIPTIONS]
    subscriptions.add(subscription)
    try:
        await response.prepare(request)
        await response.write(b"retry: 2000\n\n" + b"".join(map(format_event, told)))
        await _pump(response, subscription, state.settings.heartbeat_s, flow)
    except (ConnectionError, RuntimeError):
        pass  # the client went away (aiohttp raises these on a closed transport)
    finally:
        subscriptions.discard(subscription)
        subscription.close()
    return response


def _told(
    state: AppState, types: frozenset[str] | None, flow: str | None, event_id: int
) -> list[Event]:
    """A ``latest`` event (id ``event_id``) per port of each flow running here (only
    ``flow`` with a link), carrying what its last ``latest`` event did, for a stream
    that starts now; none if the stream does not take ``latest``. Read in the turn
    the subscription is made, so each value reaches the reader once: here, or later."""
    if types is not None and "latest" not in types:
        return []
    now = time.time()
    return [
        Event(event_id, "latest", now, latest_data(name, key, value, ident))
        for name, session in state.sessions.items()
        if session.started and flow in (None, name)
        for key, (value, ident) in session.snapshot().told.items()
    ]


async def _pump(
    response: web.StreamResponse,
    subscription: Subscription,
    heartbeat_s: float,
    flow: str | None = None,
) -> None:
    """Copy events to the client until the subscription closes (app shutdown); with
    ``flow``, only events whose ``flow`` is it (and the stream's own drop notes)."""
    reported_drops = 0
    while True:
        event = await subscription.get(timeout=heartbeat_s)
        if event is None:
            if subscription.closed:
                return
            await response.write(b": heartbeat\n\n")
            continue
        if subscription.dropped > reported_drops:
            missed = subscription.dropped - reported_drops
            reported_drops = subscription.dropped
            note: dict[str, Any] = {"missed": missed, "reason": "slow reader"}
            await response.write(format_event(Event(0, "events_dropped", event.time, note)))
        if flow is not None and event.id != 0 and event.data.get("flow") != flow:
            continue
        await response.write(format_event(event))


async def close_streams(app: web.Application) -> None:
    """On shutdown: end every event stream so the server can stop promptly."""
    streams = app[SUBSCRIPTIONS]
    for subscription in list(streams):
        subscription.close()


def add_routes(app: web.Application) -> None:
    streams: set[Subscription] = set()
    app[SUBSCRIPTIONS] = streams
    app.on_shutdown.append(close_streams)
    app.router.add_get("/api/events", stream_events)
