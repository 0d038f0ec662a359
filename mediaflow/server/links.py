"""Wall links: read access to ONE flow, to share a wall without sharing the token.

``POST /api/flows/{flow}/links`` (needs ``Authorization: Bearer $MEDIAFLOW_TOKEN``)
with an optional JSON body ``{"expires_in_s": N}`` (default
``MEDIAFLOW_LINK_DEFAULT_S``, one day; at most ``MEDIAFLOW_LINK_MAX_S``, 30 days)
answers 201 ``{"link", "url", "path", "flow", "issued_at", "expires_at",
"expires_in_s", "reads_locked"}`` (times in Unix seconds; ``url`` is absolute,
built from the request's ``Host`` when it has one, else ``path``). Refusals: 400
for a bad body or flow name, 413 for a body over 4 KiB, 404 for a flow the
server knows nothing about (no session, run record, latest value or backlog),
409 without ``MEDIAFLOW_TOKEN`` (links are signed with a key derived from it,
:mod:`.linktoken`, so no link is stored anywhere; changing the token revokes
them all).

A link is presented four ways: ``/?link=L`` once in a browser (answered with a
303 to ``/`` that sets the HttpOnly cookie ``mediaflow_link``, path ``/``, for
the link's lifetime; SameSite=Lax, not Strict, so a link opened from a chat or
a mail reaches the wall: the cookie only ever reads); or
``Authorization: Link L`` from API clients; or ``/artifacts/{digest}?link=L``
for one artifact (a URL that carries its own access: what the webhook sink sends,
docs/webhooks.md); or that cookie. With
``MEDIAFLOW_LOCK_READS=1`` and no token credential, a genuine unexpired link
for flow F reads ONLY:

* the wall (``/``, ``/static/...``, ``/favicon.ico``);
* ``GET /api/flows/F``, and ``GET /api/flows`` listing F alone;
* ``GET /api/events``, with only the events whose ``flow`` is F (and the
  stream's own ``events_dropped`` notes, whose counts are of the shared stream);
* ``/artifacts/{digest}`` for a digest that F's latest values reference now,
  or were seen referencing at some moment from the link's ``issued_at`` (to
  the millisecond) until now: :mod:`.linkledger` notes what the server sees
  (``latest`` events, the flow views it answers a link, fresh reads), so a
  frame the wall showed and then replaced stays readable while one replaced
  before the link was made does not. The notes are in memory and bounded
  (``MEDIAFLOW_LINK_HISTORY`` per port): after a restart, or for a very long
  window, a link reaches what is held now and what was seen since;
* ``/live/F/...``: F's cameras live (playlist, init segment, parts), and over WebRTC
  (``POST /whep/F/...`` and the ``DELETE`` that ends such a session: they read);
* F's timeline: ``/api/recordings/F...`` (its recorders, their spans, gaps and
  exports) and ``/api/flows/F/events``, and ``/artifacts/{digest}`` for any clip
  or event snapshot on it, whenever recorded (the wall's timeline plays them).

A token credential (Bearer or the wall cookie) wins over a link on the same
request.

Anything else is 403 with a JSON error; writes carrying a link are 403
(links only read); a malformed, forged (or signed with another token) or
expired link is 401 saying which (``reason``: ``malformed``,
``bad_signature``, ``expired``). Without ``MEDIAFLOW_LOCK_READS`` reads are
open to anyone, so a link adds nothing, but links are still made (the answer
says ``"reads_locked": false``) so a wall shared now keeps working once reads
are locked.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from mediaflow.engine.events import Event
from mediaflow.flows.spec import NAME_RE
from mediaflow.server import api
from mediaflow.server.artifacts import error
from mediaflow.server.linkledger import DigestLedger
from mediaflow.server.linktoken import LinkClaims, LinkError, link_key, make_link, read_link
from mediaflow.server.settings import ServerSettings
from mediaflow.server.state import STATE, AppState
from mediaflow.server.views import flow_summary
from mediaflow.server.whip import ROUTES as WHIP_ROUTES

LIVE_ROUTES = frozenset(
    {"/live/{flow}/{node}.m3u8", "/live/{flow}/{node}/init.mp4", "/live/{flow}/{node}/{seq}.m4s"}
)
# WebRTC live view (mediaflow.server.whep): a POST that opens a viewer and the DELETE
# that ends it read, as the live routes do; a link of the flow opens them.
WHEP_ROUTES = frozenset({"/whep/{flow}/{node}", "/whep/{flow}/{node}/{session}"})
# The flow's recordings and events: what its wall's timeline shows.
TIMELINE_ROUTES = frozenset(
    {
        "/api/recordings/{flow}",
        "/api/recordings/{flow}/{node}",
        "/api/recordings/{flow}/{node}/export.mp4",
        "/api/flows/{flow}/events",
    }
)
LINK_COOKIE = "mediaflow_link"
# An artifact's URL may carry the link itself (``/artifacts/{digest}?link=L``): a
# self-contained URL for a program that cannot set a header (a webhook's receiver
# handing an image on to a chat). It opens that read only; the access log leaves
# the query out (``app.SECRET_PARAMS``) and the answer is ``private`` to caches.
ARTIFACT_PREFIX = "/artifacts/"
MAX_BODY = 4096
NO_STORE = {"Cache-Control": "no-store"}
# Routes a link reads as they are (canonical patterns: no path from the request is parsed).
WALL_ROUTES = frozenset({"/", "/favicon.ico", "/static/{name}", "/api/events"})


class LinkService:
    """Signs and checks this app's links and keeps the ledger of what flows held.

    ``clock`` (Unix seconds) is an attribute so tests can move time.
    """

    def __init__(self, state: AppState, clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.settings = state.settings
        token = self.settings.token
        self.key = link_key(token) if token else None
        self.ledger = DigestLedger(self.settings.link_history)
        self.clock = clock

    def read(self, link: str) -> LinkClaims:
        """The claims of a genuine, unexpired link; raises :class:`LinkError`."""
        if self.key is None:  # no token, no auth middleware: never called
            raise LinkError("wall links need MEDIAFLOW_TOKEN")
        return read_link(self.key, link, math.floor(self.clock() * 1000))

    def on_event(self, event: Event) -> None:
        """Bus listener: a ``latest`` event is a port seen holding a value."""
        if event.type != "latest":
            return
        data = event.data
        flow, node, port = data.get("flow"), data.get("node"), data.get("port")
        if isinstance(flow, str) and isinstance(node, str) and isinstance(port, str):
            self.ledger.observe(flow, node, port, data.get("value"), self.clock())

    def observe_view(self, flow: str, view: Any) -> None:
        """Note the latest values a flow view (``/api/flows/{flow}``, see :mod:`.views`)
        shows; anything not of that shape is ignored."""
        now = self.clock()
        nodes = view.get("nodes") if isinstance(view, dict) else None
        for node in nodes if isinstance(nodes, list) else ():
            outputs = node.get("outputs") if isinstance(node, dict) else None
            if not isinstance(outputs, dict) or not isinstance(node.get("id"), str):
                continue
            for port, output in outputs.items():
                if isinstance(output, dict):
                    self.ledger.observe(flow, node["id"], port, output.get("latest"), now)

    async def observe_now(self, flow: str) -> None:
        """Read ``flow``'s latest values where the API reads them, and note them."""
        session = self.state.sessions.get(flow)
        if session is not None and session.started:
            latest: Mapping[tuple[str, str], Any] = session.snapshot().latest
        else:
            latest = await api.queue_latest(self.state, flow)
        self.ledger.observe_all(flow, latest, self.clock())

    async def may_read(self, claims: LinkClaims, digest: str) -> bool:
        """Whether ``claims``' flow holds ``digest`` now or was seen holding it since
        the link was issued. Reads the flow's latest values only on a ledger miss."""
        if self.ledger.held_since(claims.flow, digest, claims.issued_at):
            return True
        timeline = self.state.timeline
        if await asyncio.to_thread(timeline.holds, claims.flow, digest):
            return True  # a clip or a snapshot on the flow's timeline
        await self.observe_now(claims.flow)
        return self.ledger.held_since(claims.flow, digest, claims.issued_at)


LINKS: web.AppKey[LinkService] = web.AppKey("mediaflow_links", LinkService)
# Set on a request the auth middleware let through on a link: what it may read.
# web.RequestKey is aiohttp 3.14+ (a plain key there warns); older ones take the name.
if TYPE_CHECKING or hasattr(web, "RequestKey"):
    SCOPE = web.RequestKey("mediaflow_link_scope", LinkClaims)
else:  # pragma: no cover - aiohttp < 3.14
    SCOPE = "mediaflow_link_scope"


def publishes(request: web.Request) -> bool:
    """Whether the request publishes into a WebRTC node (``/whip/...``): the one write a
    link opens (for its flow, see :func:`serve_scoped`)."""
    resource = request.match_info.route.resource
    return resource is not None and resource.canonical in WHIP_ROUTES


def presented(request: web.BaseRequest) -> str | None:
    """The link a request carries (``Authorization: Link L``; for an artifact, a
    ``?link=L`` in its URL; else the cookie), if any."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "link":
        return given.strip()
    if "link" in request.query and request.path.startswith(ARTIFACT_PREFIX):
        return request.query["link"]
    return request.cookies.get(LINK_COOKIE)


def refused(exc: LinkError) -> web.Response:
    """401 for a link that opens nothing, saying why."""
    challenge = f'Link realm="mediaflow", error="invalid_token", error_description="{exc.reason}"'
    return web.json_response(
        {"error": str(exc), "reason": exc.reason},
        status=401,
        headers={"WWW-Authenticate": challenge, **NO_STORE},
    )


def outside(claims: LinkClaims, why: str) -> web.Response:
    """403 for a read the link does not open; ``why`` says what was refused."""
    flow = claims.flow
    return web.json_response(
        {
            "error": f"{why}; this wall link opens flow {flow!r} only: the wall,"
            f" GET /api/flows/{flow}, its events, and the artifacts its ports held since"
            " the link was made",
            "flow": flow,
        },
        status=403,
        headers=NO_STORE,
    )


def is_view(request: web.BaseRequest) -> bool:
    """Whether ``request`` opens or ends a WebRTC view (:data:`WHEP_ROUTES`): a read,
    whatever its method."""
    if not isinstance(request, web.Request):
        return False
    resource = request.match_info.route.resource
    return resource is not None and resource.canonical in WHEP_ROUTES


def read_only() -> web.Response:
    """403 for a write that carries a link and not the token."""
    return error(403, "a wall link only reads; writes need Authorization: Bearer $MEDIAFLOW_TOKEN")


def landing(request: web.Request) -> web.StreamResponse:
    """``GET /?link=L``: set the link cookie for a genuine link and redirect to ``/``."""
    service = request.app[LINKS]
    link = request.query.get("link", "")
    try:
        claims = service.read(link)
    except LinkError as exc:
        return refused(exc)
    response = web.Response(
        status=303, headers={"Location": "/", "Referrer-Policy": "no-referrer", **NO_STORE}
    )
    left_s = math.ceil(claims.expires_at - service.clock())
    response.set_cookie(
        LINK_COOKIE,
        link,
        max_age=max(1, left_s),
        path="/",
        httponly=True,
        samesite="Lax",
        secure=request.secure,
    )
    return response


async def serve_scoped(request: web.Request, handler: Handler, link: str) -> web.StreamResponse:
    """Answer a read carried by ``link`` alone (the auth middleware calls this)."""
    service = request.app[LINKS]
    try:
        claims = service.read(link)
    except LinkError as exc:
        return refused(exc)
    request[SCOPE] = claims
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else None
    if route in WALL_ROUTES:
        return await handler(request)
    if route == "/api/flows":
        return await flow_listing(service.state, claims.flow)
    if route == "/api/flows/{flow}" and request.match_info["flow"] == claims.flow:
        response = await handler(request)
        # Note exactly what the link's holder is shown: its wall may ask for any of it.
        body = response.body if isinstance(response, web.Response) else None
        if isinstance(body, bytes) and response.content_type == "application/json":
            service.observe_view(claims.flow, json.loads(body))
        return response
    if route in LIVE_ROUTES | WHEP_ROUTES and request.match_info["flow"] == claims.flow:
        return await handler(request)  # its cameras, live: what its wall shows
    if route in WHIP_ROUTES and request.match_info["flow"] == claims.flow:
        return await handler(request)  # a phone given the wall link publishes its camera
    if route in TIMELINE_ROUTES and request.match_info["flow"] == claims.flow:
        return await handler(request)  # its recordings and events: its wall's timeline
    if route == "/artifacts/{digest}":
        if await service.may_read(claims, request.match_info["digest"]):
            return await handler(request)
        return outside(claims, f"flow {claims.flow!r} has not held this artifact since then")
    return outside(claims, f"{request.method} {request.path[:200]} is outside this wall link")


async def flow_listing(state: AppState, flow: str) -> web.Response:
    """``GET /api/flows`` for a link: the one flow it opens (or none yet)."""
    backlog, reachable = await api.queue_backlog(state)
    view = await api.flow_view(state, flow, backlog)
    flows = [] if view is None else [flow_summary(view)]
    body = {"flows": flows, "queue": "ok" if reachable else "unavailable"}
    return web.json_response(body, headers=NO_STORE)


class BadRequest(ValueError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_lifetime(request: web.Request, settings: ServerSettings) -> float:
    """``expires_in_s`` from the body (empty: the default). Raises :class:`BadRequest`."""
    usage = 'the body must be empty or a JSON object {"expires_in_s": seconds}'
    raw = bytearray()
    while len(raw) <= MAX_BODY:
        chunk = await request.content.read(MAX_BODY + 1 - len(raw))
        if not chunk:
            break
        raw += chunk
    if len(raw) > MAX_BODY:
        raise BadRequest(413, f"the body is larger than {MAX_BODY} bytes; {usage}")
    if not raw.strip():
        return settings.link_default_s
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadRequest(400, f"the body is not JSON; {usage}") from None
    if not isinstance(body, dict):
        raise BadRequest(400, usage)
    unknown = sorted(set(body) - {"expires_in_s"})
    if unknown:
        raise BadRequest(400, f"unknown field(s) {', '.join(map(repr, unknown))}; {usage}")
    value = body.get("expires_in_s", settings.link_default_s)
    longest = settings.link_max_s
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRequest(400, "expires_in_s must be a number of seconds")
    if not 1 <= value <= longest:
        raise BadRequest(
            400,
            f"expires_in_s must be from 1 to {longest:.15g} seconds ({longest / 86400:.15g} days)",
        )
    return float(value)


async def create_link(request: web.Request) -> web.StreamResponse:
    """``POST /api/flows/{flow}/links``: see the module docstring."""
    service = request.app[LINKS]
    state = request.app[STATE]
    name = request.match_info["flow"]
    if service.key is None:
        return error(409, "wall links are signed with a key derived from MEDIAFLOW_TOKEN; set it")
    if NAME_RE.fullmatch(name) is None:
        return error(400, "malformed flow name")
    try:
        lifetime = await read_lifetime(request, state.settings)
    except BadRequest as exc:
        return error(exc.status, str(exc))
    backlog, _ = await api.queue_backlog(state)
    view = await api.flow_view(state, name, backlog)
    if view is None:
        return error(404, f"no flow {name!r}")
    issued_ms = math.floor(service.clock() * 1000)
    claims = LinkClaims(name, issued_ms, issued_ms + round(lifetime * 1000))
    try:
        link = make_link(service.key, claims)
    except ValueError as exc:  # a flow name too long to fit in a link
        return error(400, str(exc))
    service.observe_view(name, view)  # what the flow holds as the link is made
    path = f"/?link={link}"
    body = {
        "link": link,
        "url": f"{request.scheme}://{request.host}{path}" if "Host" in request.headers else path,
        "path": path,
        "flow": name,
        "issued_at": claims.issued_at,
        "expires_at": claims.expires_at,
        "expires_in_s": lifetime,
        "reads_locked": state.settings.lock_reads,
    }
    return web.json_response(body, status=201, headers=NO_STORE)


def add_routes(app: web.Application) -> None:
    state = app[STATE]
    service = app[LINKS] = LinkService(state)
    if state.settings.token and state.settings.lock_reads:
        stop_listening = state.bus.listen(service.on_event)

        async def stop(_: web.Application) -> None:
            stop_listening()

        app.on_cleanup.append(stop)
    app.router.add_post("/api/flows/{flow}/links", create_link)
