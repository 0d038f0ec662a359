"""``/api/flows``, ``/api/flows/{flow}``, ``/api/devices`` and ``/healthz``.

Handlers gather facts (blocking reads in worker threads, queue calls
awaited) and hand them to :mod:`.views`. A queue that does not answer is
reported in the body (``"queue": "unavailable"``) rather than failing the
page: the flows and their latest values are still worth showing.
"""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from mediaflow.flows.spec import NAME_RE
from mediaflow.queue import QueueError, StreamBacklog, StreamKey
from mediaflow.server.artifacts import error
from mediaflow.server.state import STATE, AppState
from mediaflow.server.views import (
    control_state,
    flow_summary,
    live_flow_view,
    stored_flow_view,
)

QUEUE_TIMEOUT_S = 2.0
NO_STORE = {"Cache-Control": "no-store"}


def stored_flow_names(data_dir: Path) -> list[str]:
    """Flows the state store has run records for. Blocking; [] without a store.

    Read-only and separate from :class:`StateStore`, which has no listing yet.
    """
    path = data_dir / "state.sqlite3"
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = conn.execute("SELECT DISTINCT flow FROM runs").fetchall()
    except sqlite3.OperationalError:
        return []  # created but not migrated yet
    finally:
        conn.close()
    return sorted(str(row[0]) for row in rows)


async def queue_backlog(state: AppState) -> tuple[dict[StreamKey, StreamBacklog], bool]:
    """The queue's backlog per stream and whether the queue answered."""
    if state.queue is None:
        return {}, False
    try:
        backlog = await asyncio.wait_for(state.queue.backlog(), QUEUE_TIMEOUT_S)
    except (QueueError, TimeoutError) as exc:
        state.queue_watch.failed("the backlog", exc)
        return {}, False
    state.queue_watch.answered()
    return backlog, True


async def queue_latest(state: AppState, flow: str) -> dict[tuple[str, str], Any]:
    """The latest values the queue recorded for ``flow`` ({} if it does not answer)."""
    if state.queue is None:
        return {}
    try:
        latest = await asyncio.wait_for(state.queue.latest(flow), QUEUE_TIMEOUT_S)
    except (QueueError, TimeoutError) as exc:
        state.queue_watch.failed(f"the latest values of {flow!r}", exc)
        return {}
    state.queue_watch.answered()
    return latest


async def flow_view(
    state: AppState, name: str, backlog: dict[StreamKey, StreamBacklog]
) -> dict[str, Any] | None:
    """The full view of flow ``name``, or None if nothing is known about it."""
    store = await state.state_store()
    run = await asyncio.to_thread(store.last_run, name)
    now = time.time()
    session = state.sessions.get(name)
    if session is not None and session.started:
        snapshot = session.snapshot()
        # What the event stream told, not what was emitted: durable values only, each
        # the one its `latest` event carried, so the poll and the stream agree.
        told = snapshot.told
        return live_flow_view(
            snapshot.spec,
            latest={key: value for key, (value, _) in told.items()},
            ids={key: ident for key, (_, ident) in told.items()},
            counts=snapshot.lines,
            backlog=backlog,
            run=run,
            now=now,
            control=control_state(snapshot),
            live=session.live,
        )
    latest = await queue_latest(state, name)
    if not latest and run is None and not any(s.flow == name for s in backlog):
        return None
    return stored_flow_view(name, latest=latest, backlog=backlog, run=run, now=now)


async def list_flows(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    names = set(state.sessions) | set(await asyncio.to_thread(stored_flow_names, state.data_dir))
    backlog, reachable = await queue_backlog(state)
    names |= {stream.flow for stream in backlog}
    flows = []
    for name in sorted(names):
        view = await flow_view(state, name, backlog)
        if view is not None:
            flows.append(flow_summary(view))
    body = {"flows": flows, "queue": "ok" if reachable else "unavailable"}
    return web.json_response(body, headers=NO_STORE)


async def get_flow(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    name = request.match_info["flow"]
    if NAME_RE.fullmatch(name) is None:
        return error(400, "malformed flow name")
    backlog, reachable = await queue_backlog(state)
    view = await flow_view(state, name, backlog)
    if view is None:
        return error(404, f"no flow {name!r}")
    forwarding = state.forwarding.get(name)
    if forwarding is not None:
        view["forward"] = forwarding().to_json()
    view["queue"] = "ok" if reachable else "unavailable"
    return web.json_response(view, headers=NO_STORE)


async def list_devices(request: web.Request) -> web.StreamResponse:
    """Cameras and microphones on this machine, from ``connectors.describe_devices``.

    DESIGN.md: mediaflow reaches devices only through the connector package,
    imported here (in a worker thread: PyAV and PortAudio load on first use).
    503 when the package or the function is not there.
    """

    def describe() -> Any:
        module = importlib.import_module("connectors")
        return module.describe_devices()

    try:
        described = await asyncio.to_thread(describe)
    except (ImportError, AttributeError) as exc:
        return error(503, f"device listing unavailable: {type(exc).__name__}: {exc}")
    except OSError as exc:
        return error(503, f"device listing failed: {exc}")
    return web.json_response(described, headers=NO_STORE)


async def healthz(request: web.Request) -> web.StreamResponse:
    """200 ``{"ok": true, "queue": "ok"}`` when the queue answers, else 503."""
    state = request.app[STATE]
    if state.queue is None:
        return web.json_response({"ok": False, "queue": "none"}, status=503, headers=NO_STORE)
    try:
        await asyncio.wait_for(state.queue.backlog_flows(), QUEUE_TIMEOUT_S)
    except (QueueError, TimeoutError) as exc:
        body = {"ok": False, "queue": "unavailable", "error": str(exc) or type(exc).__name__}
        return web.json_response(body, status=503, headers=NO_STORE)
    return web.json_response({"ok": True, "queue": "ok"}, headers=NO_STORE)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/flows", list_flows)
    app.router.add_get("/api/flows/{flow}", get_flow)
    app.router.add_get("/api/devices", list_devices)
    app.router.add_get("/healthz", healthz)
