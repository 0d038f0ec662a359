"""WHIP: ``POST /whip/{flow}/{node}`` publishes into a ``connector = "webrtc"`` node.

The body is the publisher's SDP offer (``Content-Type: application/sdp``, at most
``MAX_OFFER`` bytes); the answer is 201 with the SDP answer and a ``Location``,
``/whip/{flow}/{node}/{session}``, whose ``DELETE`` ends the session (200; 404 when
there is none). This follows the WHIP draft: ICE candidates travel in the SDP, no
trickle (``PATCH`` is 405).

Decided first, then answered: 404 when no session of this process runs ``flow`` or
its ``node`` is not a WHIP node (:class:`mediaflow.ingest.WhipIngest`), 415 for
another content type, 413 for a larger body, 400 for one that is not UTF-8 or an
offer the node cannot answer, 503 (with ``Retry-After``) when the node has all the
publishers it takes. Never a 5xx for anything a publisher sends.

Credentials: the token (``Authorization: Bearer``), as for every write, or a wall
link for this flow (``Authorization: Link``, or the link's cookie from the wall):
the one write a link opens, so a phone given the wall link can be a camera
(:mod:`.links`).
"""

from __future__ import annotations

from aiohttp import web

from mediaflow.flows.spec import NAME_RE
from mediaflow.ingest import IngestRefused, WhipIngest
from mediaflow.server.artifacts import error
from mediaflow.server.state import STATE, AppState

SDP = "application/sdp"
MAX_OFFER = 64 * 1024  # a browser's offer is ~5 KB; OBS's smaller
SESSION_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
ROUTES = frozenset({"/whip/{flow}/{node}", "/whip/{flow}/{node}/{session}"})


def find_target(state: AppState, flow: str, node: str) -> WhipIngest | None:
    """The WHIP node ``node`` of the flow ``flow`` running in this process, or None."""
    if NAME_RE.fullmatch(flow) is None or NAME_RE.fullmatch(node) is None:
        return None
    session = state.sessions.get(flow)
    if session is None or not session.started:
        return None
    try:
        target = session.node(node)
    except KeyError:
        return None
    return target if isinstance(target, WhipIngest) else None


async def read_offer(request: web.Request) -> str | web.Response:
    """The offer's text, or the answer refusing it (413, 400)."""
    if request.content_length is not None and request.content_length > MAX_OFFER:
        return error(413, f"an SDP offer is at most {MAX_OFFER} bytes")
    body = bytearray()
    while chunk := await request.content.read(MAX_OFFER + 1 - len(body)):
        body += chunk
        if len(body) > MAX_OFFER:
            return error(413, f"an SDP offer is at most {MAX_OFFER} bytes")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return error(400, "an SDP offer is UTF-8 text")


def refused(exc: IngestRefused) -> web.Response:
    response = error(exc.status, str(exc))
    if exc.retry_after_s is not None:
        response.headers["Retry-After"] = str(exc.retry_after_s)
    return response


async def publish(request: web.Request) -> web.StreamResponse:
    """``POST /whip/{flow}/{node}``: answer a publisher's offer (see the module doc)."""
    flow, node = request.match_info["flow"], request.match_info["node"]
    target = find_target(request.app[STATE], flow, node)
    if target is None:
        return error(404, f"no WebRTC (WHIP) node {node!r} runs in flow {flow!r} here")
    if request.content_type != SDP:
        return error(415, f"a WHIP offer is {SDP}")
    offer = await read_offer(request)
    if isinstance(offer, web.Response):
        return offer
    try:
        answer = await target.whip_offer(offer)
    except IngestRefused as exc:
        return refused(exc)
    headers = {"Location": f"/whip/{flow}/{node}/{answer.session}", "Cache-Control": "no-store"}
    return web.Response(status=201, text=answer.sdp, content_type=SDP, headers=headers)


async def hang_up(request: web.Request) -> web.StreamResponse:
    """``DELETE /whip/{flow}/{node}/{session}``: end that publisher."""
    flow, node = request.match_info["flow"], request.match_info["node"]
    session = request.match_info["session"]
    target = find_target(request.app[STATE], flow, node)
    if target is None or not session or not set(session) <= SESSION_CHARS:
        return error(404, "no such WHIP session")
    if not await target.whip_end(session):
        return error(404, "no such WHIP session")
    return web.json_response({"ended": session}, headers={"Cache-Control": "no-store"})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/whip/{flow}/{node}", publish)
    app.router.add_delete("/whip/{flow}/{node}/{session}", hang_up)
