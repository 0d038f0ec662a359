"""``GET /``: the wall, plain HTML, CSS and JS shipped in ``mediaflow/server/static/``.

The files are read once when the app is built and served from memory with
a content hash as ETag; there is no build step. ``/?token=...`` is the
token link of :mod:`.auth`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from aiohttp import web

from mediaflow.server import auth

_JS = "text/javascript; charset=utf-8"
# Only these names are served (no directory listing, no path from the request reaches
# the file system). The scripts are the ones index.html loads, in its order.
STATIC_FILES = {
    "index.html": "text/html; charset=utf-8",
    "dom.js": _JS,
    "text.js": _JS,
    "widget.js": _JS,
    "live.js": _JS,
    "whep.js": _JS,
    "media.js": _JS,
    "text-widgets.js": _JS,
    "status.js": _JS,
    "control.js": _JS,
    "timeline-draw.js": _JS,
    "timeline-play.js": _JS,
    "timeline.js": _JS,
    "publish.js": _JS,
    "flows.js": _JS,
    "wall.js": _JS,
    "wall.css": "text/css; charset=utf-8",
}
# The wall loads its own scripts and style, media from this origin, and talks to the API.
WALL_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "media-src 'self' blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str
    etag: str


STATIC: web.AppKey[dict[str, StaticFile]] = web.AppKey("mediaflow_static", dict)


def load_static() -> dict[str, StaticFile]:
    """Read the wall's files from the package. Raises ``FileNotFoundError`` if one is missing."""
    folder = resources.files("mediaflow.server").joinpath("static")
    loaded = {}
    for name, content_type in STATIC_FILES.items():
        body = folder.joinpath(name).read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        loaded[name] = StaticFile(body, content_type, etag)
    return loaded


def _serve(request: web.Request, name: str) -> web.StreamResponse:
    static = request.app[STATIC][name]
    headers = {
        "Content-Type": static.content_type,
        "ETag": static.etag,
        "Cache-Control": "no-cache",  # revalidate: a new release must show at once
        "X-Content-Type-Options": "nosniff",
    }
    if name == "index.html":
        headers["Content-Security-Policy"] = WALL_CSP
        headers["Referrer-Policy"] = "no-referrer"
    if static.etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers=headers)
    return web.Response(body=static.body, headers=headers)


async def index(request: web.Request) -> web.StreamResponse:
    if "token" in request.query:
        return auth.token_link(request)
    return _serve(request, "index.html")


async def static_file(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in STATIC_FILES or name == "index.html":
        return web.json_response({"error": "not found"}, status=404)
    return _serve(request, name)


async def favicon(request: web.Request) -> web.StreamResponse:
    return web.Response(status=204, headers={"Cache-Control": "max-age=86400"})


def add_routes(app: web.Application) -> None:
    app[STATIC] = load_static()
    app.router.add_get("/", index)
    app.router.add_get("/favicon.ico", favicon)
    app.router.add_get("/static/{name}", static_file)
