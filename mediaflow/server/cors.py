"""Cross-origin reads, off unless ``MEDIAFLOW_CORS_ORIGINS`` lists origins.

An allowed ``Origin`` gets ``Access-Control-Allow-Origin`` echoed back (with
``Vary: Origin``) on every response, added from ``on_response_prepare`` so
errors and streams carry it too; preflights (``OPTIONS`` with
``Access-Control-Request-Method``) are answered here, before auth. Credentials
(cookies) are never allowed across origins: another site's page must send
the Bearer token itself.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from mediaflow.server.settings import ServerSettings

ALLOW_METHODS = "GET, HEAD, PUT, OPTIONS"
ALLOW_HEADERS = (
    "Authorization, Content-Type, Range, If-Range, If-None-Match, If-Match, "
    "If-Modified-Since, If-Unmodified-Since, Last-Event-ID, X-Mediaflow-Meta"
)
EXPOSE_HEADERS = "Content-Range, Content-Length, Accept-Ranges, ETag, Last-Modified, Location"
PREFLIGHT_MAX_AGE = "600"


def allowed(origin: str | None, settings: ServerSettings) -> bool:
    if origin is None or not settings.cors_origins:
        return False
    return "*" in settings.cors_origins or origin.rstrip("/") in settings.cors_origins


def add_headers(
    request: web.BaseRequest, response: web.StreamResponse, settings: ServerSettings
) -> None:
    """Mark ``response`` readable by the request's origin, when that origin is allowed."""
    origin = request.headers.get("Origin")
    if not allowed(origin, settings):
        return
    assert origin is not None
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
    vary = response.headers.get("Vary")
    response.headers["Vary"] = "Origin" if not vary else f"{vary}, Origin"


def middleware(
    settings: ServerSettings,
) -> Middleware:
    """Answer CORS preflights (204 for an allowed origin, 403 otherwise)."""

    @web.middleware
    async def preflight(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return await handler(request)
        if not allowed(request.headers.get("Origin"), settings):
            return web.json_response({"error": "origin not allowed"}, status=403)
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Methods": ALLOW_METHODS,
                "Access-Control-Allow-Headers": ALLOW_HEADERS,
                "Access-Control-Max-Age": PREFLIGHT_MAX_AGE,
            },
        )

    return preflight
