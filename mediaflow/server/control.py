"""Operating flows over HTTP: flow control, dead letters, and who the caller is.

* ``POST /api/flows/{flow}/pause|resume|step|disable|enable`` (token): change a
  flow this process runs (``mediaflow run FLOW --port N``). Each answers the
  flow's new state, :func:`~.views.control_view`: ``{"flow", "status", "paused",
  "disabled", "stopping", "changed", "run_id", "in_memory", "finished_items"}``;
  ``step`` adds ``"stepped"``: the item it started (node, entry_id, seq,
  deliveries, enqueued_at) or null when nothing waited within ``?wait_s=``
  (default 2, at most 30). A request that asks for the state the flow is in
  already answers 200 with ``"changed": false``; one the state forbids (a step
  of a running flow, anything but ``enable`` on a disabled one, anything while
  stopping) is 409. Unknown flow 404; a flow known only from the store or the
  queue (``mediaflow serve``, or a run in another process) 409, "not running
  in this process".
* ``GET /api/flows/{flow}/dead-letters?limit=N`` (default 50, at most 1000):
  ``{"flow", "dead_letters": [...]}``, newest first (:func:`~.views.dead_letter_view`);
  ``POST .../dead-letters/{id}/requeue`` (token): 200 ``{"flow", "id",
  "requeued": item}``, the item back in its stream, ready, its deliveries kept
  (it runs again marked as a redelivery); ``DELETE .../dead-letters/{id}``
  (token): 204. Unknown id 404. These need only the queue, so ``mediaflow
  serve`` answers them too; each change is published on the bus
  (``dead_letter_requeued``, ``dead_letter_deleted``).
* ``GET /api/session``: ``{"token_required", "read", "write"}``, what this
  request may do: the wall shows its controls only when ``write`` is true.

The token is checked by :mod:`.auth`'s middleware, as for every mutating route.
Control requests go through the session's :class:`~mediaflow.engine.operate.FlowControls`,
as a node's ``ctx.more.control`` does: one at a time per flow (a step waits for its
item to start), so two operators' clicks never interleave half-way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from mediaflow.engine.operate import ACTIONS as ACTIONS
from mediaflow.engine.operate import FlowStateError
from mediaflow.engine.operate import decide as decide
from mediaflow.engine.session import FlowSession
from mediaflow.flows.spec import NAME_RE
from mediaflow.node import ControlAction
from mediaflow.queue import DeadLetters, QueueError
from mediaflow.server import auth
from mediaflow.server.api import (
    NO_STORE,
    QUEUE_TIMEOUT_S,
    queue_backlog,
    queue_latest,
    stored_flow_names,
)
from mediaflow.server.artifacts import error
from mediaflow.server.state import STATE, AppState
from mediaflow.server.views import control_view, dead_letter_view, item_view

log = logging.getLogger("mediaflow.http")

Action = ControlAction
STEP_WAIT_S = 2.0
MAX_STEP_WAIT_S = 30.0
DEAD_LETTER_LIMIT = 50
MAX_DEAD_LETTER_LIMIT = 1000
MAX_ID_LEN = 200  # backends make short ids; a longer one names nothing


def _wait_s(request: web.Request) -> float:
    """``?wait_s=``: how long a step waits for its item to start. Raises ValueError."""
    raw = request.query.get("wait_s")
    if raw is None:
        return STEP_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("wait_s must be a number of seconds") from None
    if not 0 < value <= MAX_STEP_WAIT_S:
        raise ValueError(f"wait_s must be above 0 and at most {MAX_STEP_WAIT_S:g}")
    return value


async def known_flow(state: AppState, name: str) -> bool:
    """Whether anything here knows flow ``name``: a session, a recorded run, work
    waiting or latest values in the queue."""
    if name in state.sessions:
        return True
    if name in await asyncio.to_thread(stored_flow_names, state.data_dir):
        return True
    backlog, _ = await queue_backlog(state)
    return any(stream.flow == name for stream in backlog) or bool(await queue_latest(state, name))


async def _session_of(state: AppState, name: str) -> FlowSession | web.Response:
    """The session running ``name`` in this process, or the error response to send."""
    if NAME_RE.fullmatch(name) is None:
        return error(400, "malformed flow name")
    session = state.sessions.get(name)
    if session is not None and session.started:
        return session
    if await known_flow(state, name):
        return error(
            409,
            f"flow {name!r} is not running in this process: control it through the "
            "server of its `mediaflow run FLOW --port N`",
        )
    return error(404, f"no flow {name!r}")


def control_handler(action: Action) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler of ``POST /api/flows/{flow}/<action>``."""

    async def handle(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        name = request.match_info["flow"]
        try:
            wait_s = _wait_s(request) if action == "step" else STEP_WAIT_S
        except ValueError as exc:
            return error(400, str(exc))
        found = await _session_of(state, name)
        if isinstance(found, web.Response):
            return found
        try:
            done = await found.controls.apply(action, wait_s=wait_s)
        except FlowStateError as exc:  # refused, or changed under us (the run is ending)
            return error(409, str(exc))
        except QueueError as exc:
            return error(503, f"queue unavailable: {exc}")
        body = control_view(done.after, changed=done.changed)
        stepped = done.stepped
        if action == "step":
            body["stepped"] = stepped
        log.info("flow %r: %s (%s)", name, action, body["status"])
        return web.json_response(body, headers=NO_STORE)

    return handle


# -- dead letters -----------------------------------------------------------------


def _queue_of(state: AppState, name: str) -> DeadLetters | web.Response:
    if NAME_RE.fullmatch(name) is None:
        return error(400, "malformed flow name")
    if state.queue is None:
        return error(503, "this server has no work queue")
    return state.queue


def _limit(request: web.Request) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return DEAD_LETTER_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_DEAD_LETTER_LIMIT:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_DEAD_LETTER_LIMIT}")
    return int(raw)


def _no_dead_letter(name: str, dead_id: str) -> web.Response:
    return error(404, f"flow {name!r} has no dead letter {dead_id!r}")


async def list_dead_letters(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    name = request.match_info["flow"]
    queue = _queue_of(state, name)
    if isinstance(queue, web.Response):
        return queue
    try:
        limit = _limit(request)
        letters = await asyncio.wait_for(queue.dead_letters(name, limit), QUEUE_TIMEOUT_S)
    except ValueError as exc:
        return error(400, str(exc))
    except (QueueError, TimeoutError) as exc:
        return _queue_away(exc)
    if not letters and not await known_flow(state, name):
        return error(404, f"no flow {name!r}")
    body = {"flow": name, "dead_letters": [dead_letter_view(d) for d in letters]}
    return web.json_response(body, headers=NO_STORE)


def _queue_away(exc: BaseException) -> web.Response:
    return error(503, f"queue unavailable: {exc or type(exc).__name__}")


def _dead_letter_queue(state: AppState, name: str, dead_id: str) -> DeadLetters | web.Response:
    """The queue holding ``name``'s dead letter ``dead_id``, or the refusal."""
    queue = _queue_of(state, name)
    if not isinstance(queue, web.Response) and len(dead_id) > MAX_ID_LEN:
        return _no_dead_letter(name, dead_id[:MAX_ID_LEN])
    return queue


async def requeue_dead_letter(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    name, dead_id = request.match_info["flow"], request.match_info["id"]
    queue = _dead_letter_queue(state, name, dead_id)
    if isinstance(queue, web.Response):
        return queue
    try:
        item = await asyncio.wait_for(queue.requeue_dead_letter(name, dead_id), QUEUE_TIMEOUT_S)
    except (QueueError, TimeoutError) as exc:
        return _queue_away(exc)
    if item is None:
        return _no_dead_letter(name, dead_id)
    requeued = item_view(item)
    # "id" for listeners in this process; on /api/events the event's own id takes that key.
    event = {"id": dead_id, "dead_letter_id": dead_id, **requeued}
    state.bus.publish("dead_letter_requeued", event)
    return web.json_response({"flow": name, "id": dead_id, "requeued": requeued}, headers=NO_STORE)


async def delete_dead_letter(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    name, dead_id = request.match_info["flow"], request.match_info["id"]
    queue = _dead_letter_queue(state, name, dead_id)
    if isinstance(queue, web.Response):
        return queue
    try:
        dead = await asyncio.wait_for(queue.dead_letter_of(name, dead_id), QUEUE_TIMEOUT_S)
        deleted = dead is not None and await asyncio.wait_for(
            queue.delete_dead_letter(name, dead_id), QUEUE_TIMEOUT_S
        )
    except (QueueError, TimeoutError) as exc:
        return _queue_away(exc)
    if dead is None or not deleted:
        return _no_dead_letter(name, dead_id)
    state.bus.publish(
        "dead_letter_deleted",
        {
            "flow": name,
            "id": dead_id,
            "dead_letter_id": dead_id,  # as for dead_letter_requeued
            "node": dead.node,
            "seq": dead.item.seq,
        },
    )
    return web.Response(status=204, headers=NO_STORE)


# -- who is asking ------------------------------------------------------------------


async def session_info(request: web.Request) -> web.StreamResponse:
    """What this request may do (the wall asks before it shows its controls)."""
    settings = request.app[STATE].settings
    token = settings.token
    bearer = token is not None and auth.bearer_ok(request, token)
    cookie = token is not None and auth.cookie_ok(request, token)
    body = {
        "token_required": token is not None,
        "read": token is None or not settings.lock_reads or bearer or cookie,
        "write": token is None or bearer,
    }
    return web.json_response(body, headers=NO_STORE)


def add_routes(app: web.Application) -> None:
    for action in ACTIONS:
        app.router.add_post(f"/api/flows/{{flow}}/{action}", control_handler(action))
    app.router.add_get("/api/flows/{flow}/dead-letters", list_dead_letters)
    app.router.add_post("/api/flows/{flow}/dead-letters/{id}/requeue", requeue_dead_letter)
    app.router.add_delete("/api/flows/{flow}/dead-letters/{id}", delete_dead_letter)
    app.router.add_get("/api/session", session_info)
