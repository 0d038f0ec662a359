"""Bearer-token auth: writes always need the token when one is set; reads optionally.

* ``MEDIAFLOW_TOKEN`` set: every request that is not GET, HEAD or OPTIONS needs
  ``Authorization: Bearer <token>``; anything else is 401 with
  ``WWW-Authenticate: Bearer``. Tokens are compared in constant time.
* ``MEDIAFLOW_LOCK_READS=1``: reads need it too, or the wall's cookie. A
  browser gets the cookie from a token link, ``/?token=...``, which sets it
  (HttpOnly, SameSite=Strict) and redirects to ``/`` so the token leaves the
  address bar. The cookie holds an HMAC of the token, not the token: it opens
  reads only, and cannot be replayed as a Bearer token for writes.
  ``/healthz`` stays open (liveness probes carry no secrets and reveal none).
* Wall links (:mod:`.links`): with reads locked, a read carrying no token
  credential but a link (``/?link=...`` once, then its cookie; or
  ``Authorization: Link <link>``) reads that one flow only. A write carrying
  a link and not the token is 403: links never write, but for one: publishing
  into that flow's WebRTC node (``/whip/...``, :mod:`.whip`).
* WebRTC views (``POST``/``DELETE /whep/...``, :func:`.links.is_view`) are reads:
  the same rules as ``GET /live/...``.
"""

from __future__ import annotations

import hashlib
import hmac

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from mediaflow.server import links
from mediaflow.server.settings import ServerSettings
from mediaflow.server.state import STATE

COOKIE = "mediaflow_wall"
COOKIE_MAX_AGE = 30 * 24 * 3600
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LINK_METHODS = frozenset({"GET", "HEAD"})
OPEN_PATHS = frozenset({"/healthz"})


def cookie_value(token: str) -> str:
    """What the wall's cookie holds for ``token``: a keyed hash, useless for writes."""
    return hmac.new(token.encode(), b"mediaflow wall cookie v1", hashlib.sha256).hexdigest()


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())


def bearer_ok(request: web.BaseRequest, token: str) -> bool:
    """Whether the request carries ``Authorization: Bearer <token>`` (scheme case-insensitive)."""
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and _same(given.strip(), token)


def cookie_ok(request: web.BaseRequest, token: str) -> bool:
    given = request.cookies.get(COOKIE)
    return given is not None and _same(given, cookie_value(token))


def unauthorized(request: web.BaseRequest, *, presented: bool) -> web.Response:
    """401 with the challenge of RFC 6750 section 3."""
    challenge = 'Bearer realm="mediaflow"'
    if presented:
        challenge += ', error="invalid_token"'
    message = "a valid Authorization: Bearer token is required"
    if request.method in SAFE_METHODS:
        message += " (browsers: open the token link /?token=... once)"
    return web.json_response(
        {"error": message}, status=401, headers={"WWW-Authenticate": challenge}
    )


def check(request: web.BaseRequest, settings: ServerSettings) -> web.Response | None:
    """None if the request may proceed, else the 401 to send. Pure apart from reading
    the request; also used by the upload route's ``Expect: 100-continue`` handler."""
    token = settings.token
    if token is None or request.method == "OPTIONS":
        return None
    if request.method in SAFE_METHODS or links.is_view(request):
        if not settings.lock_reads or request.path in OPEN_PATHS:
            return None
        if cookie_ok(request, token) or bearer_ok(request, token):
            return None
    elif bearer_ok(request, token):
        return None
    elif links.presented(request) is not None:
        return links.read_only()
    return unauthorized(request, presented="Authorization" in request.headers)


def middleware(
    settings: ServerSettings,
) -> Middleware:
    """The auth middleware; the token link ``/?token=`` is let through to :func:`token_link`,
    a wall link ``/?link=`` is answered by :func:`.links.landing`, and a read the token
    does not open but a link does goes to :func:`.links.serve_scoped`."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/":
            if "token" in request.query:
                return await handler(request)
            if "link" in request.query and request.method in LINK_METHODS:
                return links.landing(request)
        refused = check(request, settings)
        if refused is None:
            return await handler(request)
        opens = request.method in SAFE_METHODS or links.is_view(request) or links.publishes(request)
        link = links.presented(request) if opens else None
        if link is not None:
            return await links.serve_scoped(request, handler, link)
        return refused

    return authenticate


def token_link(request: web.Request) -> web.StreamResponse:
    """``GET /?token=T``: set the wall cookie for a right token and redirect to ``/``."""
    settings = request.app[STATE].settings
    given = request.query.get("token", "")
    response = web.Response(status=303, headers={"Location": "/", "Referrer-Policy": "no-referrer"})
    if settings.token is None:
        return response
    if not _same(given, settings.token):
        return unauthorized(request, presented=True)
    response.set_cookie(
        COOKIE,
        cookie_value(settings.token),
        max_age=COOKIE_MAX_AGE,
        path="/",
        httponly=True,
        samesite="Strict",
    )
    response.headers["Cache-Control"] = "no-store"
    return response
