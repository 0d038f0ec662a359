"""``/whep/{flow}/{node}``: a camera of this process live over WebRTC (WHEP).

- ``POST /whep/{flow}/{node}`` with an SDP offer (``Content-Type: application/sdp``)
  answers ``201`` with the SDP answer (``application/sdp``, its ICE candidates in it:
  no trickle, draft-ietf-wish-whep §4.2) and ``Location: /whep/{flow}/{node}/{id}``.
  The video is the camera's own H.264 (the frames of the live hub's feed, as the
  LL-HLS view plays them), never encoded per viewer; the sound is the feed's
  microphone as Opus, encoded once however many listen
  (:mod:`mediaflow.live.fanout`).
- ``DELETE /whep/{flow}/{node}/{id}`` ends that session: ``204``; ``404`` for a
  session this server does not hold (ended, or never made).

Refusals, decided before anything is negotiated: ``415`` for another content type,
``413`` for an offer over ``MAX_OFFER`` bytes, ``400`` for one that is not an SDP
offer with an H.264 video section (or that aiortc cannot answer), ``404`` without
a live feed of that camera, ``503`` (``Retry-After``) before its first frame and past
``MEDIAFLOW_WHEP_MAX_VIEWERS`` viewers of one camera, ``501`` when the ``webrtc``
extra (aiortc) is not installed or is an aiortc the viewer streams cannot drive
(:class:`~mediaflow.live.webrtc.UnsupportedAiortc`). An offer never gets a 5xx for
what it says.

Access is the live view's (:mod:`mediaflow.live`): the read lock, or a wall link of
the flow (:data:`mediaflow.server.links.WHEP_ROUTES`); a POST here reads, it writes
nothing.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from mediaflow.server.artifacts import error
from mediaflow.server.state import STATE

if TYPE_CHECKING:
    from mediaflow.server.whep_sessions import WhepService

log = logging.getLogger("mediaflow.whep")

SDP_TYPE = "application/sdp"
MAX_OFFER = 64 * 1024  # a browser's offer is 3-6 KiB; OBS's and GStreamer's smaller
INSTALL_HINT = "WebRTC needs the webrtc extra: pip install 'mediaflow[webrtc]'"


class _Service:
    """The app's :class:`WhepService`, made on the first offer (aiortc is imported then)."""

    def __init__(self) -> None:
        self.service: WhepService | None = None
        self.missing: str | None = None


WHEP: web.AppKey[_Service] = web.AppKey("mediaflow_whep", _Service)


def offer_problem(text: str) -> str | None:
    """Why ``text`` is not an SDP offer a viewer of H.264 video could send, or None.
    Pure: a cheap look at the lines (RFC 8866 §5) before aiortc parses it."""
    lines = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    if not lines or lines[0] != "v=0":
        return "an SDP offer starts with the line v=0 (RFC 8866 §5.1)"
    if any(len(line) < 2 or line[1] != "=" for line in lines):
        return "every SDP line is <type>=<value> (RFC 8866 §5)"
    if not any(line.startswith("m=video ") for line in lines):
        return "the offer has no video section (m=video) to receive the camera on"
    if not any(line.startswith("a=rtpmap:") and " H264/90000" in line for line in lines):
        return "the offer's video does not include H.264 (a=rtpmap:<pt> H264/90000)"
    return None


def service(app: web.Application) -> WhepService | None:
    """The app's WHEP service, made now if need be; None without aiortc."""
    held = app[WHEP]
    if held.service is None and held.missing is None:
        try:
            sessions = importlib.import_module("mediaflow.server.whep_sessions")
        except ImportError as exc:
            held.missing = str(exc)
            log.warning("%s (%s)", INSTALL_HINT, exc)
            return None
        state = app[STATE]
        held.service = sessions.WhepService(state.live, state.settings.whep_max_viewers)
    return held.service


async def offer(request: web.Request) -> web.Response:
    """``POST /whep/{flow}/{node}`` (module doc)."""
    flow, node = request.match_info["flow"], request.match_info["node"]
    if request.content_type != SDP_TYPE:
        return error(415, f"a WHEP offer is {SDP_TYPE}; got {request.content_type!r}")
    body = await request.content.read(MAX_OFFER + 1)
    if len(body) > MAX_OFFER:
        return error(413, f"an SDP offer is at most {MAX_OFFER} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return error(400, "an SDP offer is UTF-8 text")
    problem = offer_problem(text)
    if problem is not None:
        return error(400, problem)
    feed = request.app[STATE].live.feed(flow, node)
    if feed is None:
        return error(404, f"no live feed of {flow}/{node} in this process")
    if feed.init is None:
        return error(503, f"{flow}/{node} has no encoded frame yet", {"Retry-After": "1"})
    whep = service(request.app)
    if whep is None:
        return error(501, INSTALL_HINT)
    sessions = importlib.import_module("mediaflow.server.whep_sessions")
    try:
        session = await whep.open(flow, node, feed, text)
    except sessions.Refused as refused:
        return error(refused.status, str(refused), refused.headers)
    return web.Response(
        status=201,
        text=session.answer,
        content_type=SDP_TYPE,
        headers={
            "Location": f"/whep/{flow}/{node}/{session.id}",
            "Cache-Control": "no-store",
        },
    )


async def end(request: web.Request) -> web.Response:
    """``DELETE /whep/{flow}/{node}/{session}`` (module doc)."""
    held = request.app[WHEP].service
    session_id = request.match_info["session"]
    known = held.sessions.get(session_id) if held is not None else None
    if (
        held is None
        or known is None
        or (known.flow, known.node)
        != (
            request.match_info["flow"],
            request.match_info["node"],
        )
    ):
        return error(404, "no such WHEP session here (it ended, or never was)")
    await held.end(session_id)
    return web.Response(status=204, headers={"Cache-Control": "no-store"})


async def _close(app: web.Application) -> None:
    held = app[WHEP].service
    if held is not None:
        await held.close()


def add_routes(app: web.Application) -> None:
    app[WHEP] = _Service()
    app.on_shutdown.append(_close)
    app.router.add_post("/whep/{flow}/{node}", offer)
    app.router.add_delete("/whep/{flow}/{node}/{session}", end)
