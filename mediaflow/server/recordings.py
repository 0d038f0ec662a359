"""Recordings as a timeline, and the events on it.

- ``GET /api/recordings/{flow}``: the recorder nodes of a flow that kept a clip.
- ``GET /api/recordings/{flow}/{node}?start=&end=``: recorder ``node``'s spans and
  gaps in ``[start, end)`` (:mod:`mediaflow.timeline.spans`), with the events of the
  camera and microphone it records.
- ``GET /api/flows/{flow}/events?start=&end=&type=&source=&limit=``: the events noted
  in a flow (motion, loudness, transcripts ...), oldest first.

``start`` and ``end`` are ISO 8601 (UTC without a zone) or seconds since the epoch;
``end`` defaults to now and ``start`` to an hour before ``end``. Times in answers are
seconds since the epoch (``captured_at``), with ISO 8601 beside them. The index is
read in a worker thread; answers are never cached (a recording grows).
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, Final

from aiohttp import web

from mediaflow.flows.spec import NAME_RE
from mediaflow.server.artifacts import error
from mediaflow.server.state import STATE
from mediaflow.timeline.index import RecordedClip
from mediaflow.timeline.spans import lay_out
from mediaflow.timeline.times import iso, parse_time

DEFAULT_RANGE_S: Final = 3600.0
MAX_RANGE_S: Final = 31 * 86400.0  # a month of 10 s clips is about 270 000 rows
MAX_EVENTS: Final = 10_000
NO_STORE: Final = {"Cache-Control": "no-store"}
EVENT_TYPE_RE: Final = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def time_range(query: Any, now: float) -> tuple[float, float]:
    """``start`` and ``end`` of ``query`` with their defaults (module doc). Raises
    ``ValueError`` with the message a 400 answers."""
    end = parse_time(query["end"]) if "end" in query else now
    start = parse_time(query["start"]) if "start" in query else max(0.0, end - DEFAULT_RANGE_S)
    if start >= end:
        raise ValueError(f"start ({iso(start)}) must come before end ({iso(end)})")
    if end - start > MAX_RANGE_S:
        raise ValueError(f"a range is at most {MAX_RANGE_S / 86400:.0f} days")
    return start, end


def names(request: web.Request, *keys: str) -> list[str]:
    """The path's names, each checked (``ValueError`` for a malformed one)."""
    names = [request.match_info[key] for key in keys]
    for key, name in zip(keys, names, strict=True):
        if not NAME_RE.fullmatch(name):
            raise ValueError(f"malformed {key} name {name!r}")
    return names


async def list_recorders(request: web.Request) -> web.Response:
    try:
        (flow,) = names(request, "flow")
    except ValueError as exc:
        return error(400, str(exc))
    nodes = await asyncio.to_thread(request.app[STATE].timeline.recorders, flow)
    return web.json_response({"flow": flow, "recorders": sorted(nodes)}, headers=NO_STORE)


async def recording_timeline(request: web.Request) -> web.Response:
    state = request.app[STATE]
    now = time.time()
    try:
        flow, node = names(request, "flow", "node")
        start, end = time_range(request.query, now)
    except ValueError as exc:  # TimeError is one
        return error(400, str(exc))
    index, store = state.timeline, state.store

    def read() -> tuple[list[RecordedClip], bool, list[bool]]:
        clips = index.clips(flow, node, start, end)
        known = bool(clips) or node in index.recorders(flow)
        return clips, known, [store.exists(clip.ref) for clip in clips]

    clips, known, present = await asyncio.to_thread(read)
    if not known:
        return error(404, f"{flow}/{node} has recorded no clip")
    there = {id(clip) for clip, kept in zip(clips, present, strict=True) if kept}
    layout = lay_out(clips, start, end, present=lambda clip: id(clip) in there, now=now)
    sources = sorted({source for clip in clips for source in clip.sources})
    events = (
        await asyncio.to_thread(index.events, flow, start, end, sources=sources, limit=MAX_EVENTS)
        if sources
        else []
    )
    body = {
        "flow": flow,
        "node": node,
        "start": start,
        "end": end,
        "start_iso": iso(start),
        "end_iso": iso(end),
        "recorded_s": round(layout.recorded_s, 3),
        "sources": sources,
        "spans": [span.to_json() for span in layout.spans],
        "gaps": [gap.to_json() for gap in layout.gaps],
        "events": [noted.to_json() for noted in events],
    }
    return web.json_response(body, headers=NO_STORE)


def _listed(query: Any, key: str) -> list[str] | None:
    """A comma-separated filter of names, or None when absent (``ValueError`` if malformed)."""
    if key not in query:
        return None
    values = [value.strip() for value in query[key].split(",") if value.strip()]
    pattern = EVENT_TYPE_RE if key == "type" else NAME_RE
    if not values or len(values) > 32 or not all(pattern.fullmatch(v) for v in values):
        raise ValueError(f"{key} must be a comma-separated list of names")
    return values


async def list_events(request: web.Request) -> web.Response:
    state = request.app[STATE]
    query = request.query
    try:
        (flow,) = names(request, "flow")
        start, end = time_range(query, time.time())
        types, sources = _listed(query, "type"), _listed(query, "source")
        limit = int(query.get("limit", "1000"))
        if not 1 <= limit <= MAX_EVENTS:
            raise ValueError(f"limit must be between 1 and {MAX_EVENTS}")
    except ValueError as exc:  # TimeError is one
        return error(400, str(exc))
    events = await asyncio.to_thread(
        state.timeline.events, flow, start, end, sources=sources, types=types, limit=limit
    )
    body = {
        "flow": flow,
        "start": start,
        "end": end,
        "events": [noted.to_json() for noted in events],
        "truncated": len(events) == limit,
    }
    return web.json_response(body, headers=NO_STORE)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/recordings/{flow}", list_recorders)
    app.router.add_get("/api/recordings/{flow}/{node}", recording_timeline)
    app.router.add_get("/api/flows/{flow}/events", list_events)
