"""``GET /openapi.json``: the HTTP API described as an OpenAPI 3.1 document.

:func:`document` builds it from the constants the handlers use (the name and
digest patterns, limits, the wall's file names, the link lifetime this server
allows), so the two cannot drift apart silently; ``tests/test_http_openapi.py``
checks that every route the app registers is described and fuzzes a live
server against the document with schemathesis. The JSON is built once, when
the app is, and served from memory. The schemas, shared responses and
credentials it refers to are in :mod:`.openapi_parts`.

The document is a read like any other: with ``MEDIAFLOW_LOCK_READS=1`` it
needs the token (or the wall's cookie), and a wall link does not open it.
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any

from aiohttp import web

from mediaflow.flows.spec import NAME_PATTERN
from mediaflow.server import control, links, sse, uploads, wall
from mediaflow.server.openapi_parts import (
    ARTIFACT_HEADERS,
    ARTIFACT_TYPES,
    BINARY,
    DIGEST,
    ERROR,
    ERRORS,
    FLOW,
    JSON,
    LINK_READ,
    READ,
    SECURITY_SCHEMES,
    STR,
    UPLOAD_TYPES,
    WRITE,
    Schema,
    answer,
    component_schemas,
    errors,
    header,
    obj,
    op,
    param,
    ref,
    string,
    text,
)
from mediaflow.server.openapi_timeline import timeline_ops, timeline_schemas
from mediaflow.server.openapi_whep import whep_ops
from mediaflow.server.openapi_whip import whip_ops
from mediaflow.server.settings import ServerSettings
from mediaflow.server.state import STATE

DOCUMENT: web.AppKey[bytes] = web.AppKey("mediaflow_openapi", bytes)
DESCRIPTION = """\
Media pipelines' artifacts, flows, events and wall.

**Credentials.** With `MEDIAFLOW_TOKEN` set, every write needs
`Authorization: Bearer <token>`; with `MEDIAFLOW_LOCK_READS=1` every read but
`/healthz` needs it too, or the wall's cookie (set by `GET /?token=...`). A
wall link (`POST /api/flows/{flow}/links`) reads one flow only: its wall, its
view and events, and the artifacts its ports held; sent as
`Authorization: Link <link>` or as the cookie `GET /?link=...` sets.

**Errors** are JSON, `{"error": "..."}` (see the `Error` schema), except
aiohttp's own 404 and 405 for paths and methods no route has (plain text).

**HEAD.** Every GET route answers HEAD with the GET's status and headers and
no body; only `/artifacts/{digest}`, where clients rely on it, lists it.
"""


def _artifact_ops() -> Schema:
    params = [
        DIGEST,
        param("query", "type", STR, "serve as: image/*, audio/*, video/*, octet-stream"),
        param("header", "Range", STR, "one range, bytes= (others are ignored: 200)"),
        param("header", "If-Range", STR, "the ETag or the exact Last-Modified date"),
        param("header", "If-None-Match", STR, "304 when it matches the ETag"),
        param("header", "If-Match", STR, "412 unless it matches the ETag"),
        param("header", "If-Modified-Since", STR, "304 when not modified since"),
        param("header", "If-Unmodified-Since", STR, "412 when modified since"),
    ]
    content = {media: BINARY for media in ARTIFACT_TYPES}
    ranged = ARTIFACT_HEADERS | {"Content-Range": header(r"^bytes \d+-\d+/\d+$")}
    unsatisfiable = ARTIFACT_HEADERS | {"Content-Range": header(r"^bytes \*/\d+$")}
    answers = {
        "200": answer("The bytes.", headers=ARTIFACT_HEADERS) | {"content": content},
        "206": answer("The one range asked for.", headers=ranged) | {"content": content},
        "304": answer("Not modified.", headers=ARTIFACT_HEADERS),
        **errors(400, 401, 403, 404),
        "412": answer("A precondition failed.", ERROR, ARTIFACT_HEADERS),
        "416": answer("No byte of the range is in the artifact.", ERROR, unsatisfiable),
    }
    # RFC 9110 14.2: Range is defined for GET only, so a HEAD ignores it (and If-Range).
    head = {
        code: {key: value for key, value in response.items() if key != "content"}
        for code, response in answers.items()
        if code not in ("206", "416")
    }
    return {
        "get": op("An artifact's bytes", LINK_READ, answers, parameters=params),
        "head": op("An artifact's headers (Range ignored)", LINK_READ, head, parameters=params),
    }


def _upload(digest: bool) -> Schema:
    meta = param(
        "header",
        uploads.META_HEADER,
        None,
        f"the reference's meta: a JSON object, at most {uploads.MAX_META_BYTES} bytes",
        content={JSON: {"schema": {"type": "object"}}},
    )
    location = {"Location": header(r"^/artifacts/sha256:[0-9a-f]{64}$")}
    return op(
        "Store a body" + (", only if it has this digest" if digest else ""),
        WRITE,
        {
            "201": answer("Stored (or there already).", ref("MediaRef"), location),
            **errors(400, 401, 403, 413),
            "415": answer("Content-Type is not one the store keeps.", ERROR),
            "417": answer("An Expect other than 100-continue.", ERROR),
            "507": answer("The store's disk is full; nothing stored.", ERROR),
        },
        parameters=[DIGEST, meta] if digest else [meta],
        requestBody={
            "required": True,
            "description": "Any image/*, audio/*, video/*, text/plain or "
            "application/octet-stream body (no Content-Type: the last).",
            "content": {media: BINARY for media in UPLOAD_TYPES},
        },
    )


def _flow_ops(settings: ServerSettings) -> Schema:
    paths: Schema = {}
    wait = {"type": "number", "exclusiveMinimum": 0, "maximum": control.MAX_STEP_WAIT_S}
    for action in control.ACTIONS:
        params = [FLOW]
        if action == "step":
            params.append(param("query", "wait_s", wait, "how long to wait for an item"))
        answers = {"200": answer("The flow's new state.", ref("FlowState"))}
        summary = f"{action.capitalize()} a flow this process runs"
        answers |= errors(400, 401, 403, 404, 409, 503)
        paths[f"/api/flows/{{flow}}/{action}"] = {
            "post": op(summary, WRITE, answers, parameters=params)
        }
    dead = [FLOW, param("path", "id", {"type": "string", "minLength": 1})]
    limit = {"type": "integer", "minimum": 1, "maximum": control.MAX_DEAD_LETTER_LIMIT}
    refusals = errors(400, 401, 403, 404, 503)
    paths["/api/flows/{flow}/dead-letters"] = {
        "get": op(
            "A flow's dead letters, newest first",
            READ,
            {"200": answer("Its dead letters.", ref("DeadLetters"))} | refusals,
            parameters=[FLOW, param("query", "limit", limit, "at most this many")],
        )
    }
    paths["/api/flows/{flow}/dead-letters/{id}/requeue"] = {
        "post": op(
            "Put a dead letter back at the end of its stream",
            WRITE,
            {"200": answer("Requeued.", ref("Requeued"))} | refusals,
            parameters=dead,
        )
    }
    paths["/api/flows/{flow}/dead-letters/{id}"] = {
        "delete": op(
            "Discard a dead letter",
            WRITE,
            {"204": answer("Discarded.")} | refusals,
            parameters=dead,
        )
    }
    lifetime = {"type": "number", "minimum": 1, "maximum": settings.link_max_s}
    paths["/api/flows/{flow}/links"] = {
        "post": op(
            "A signed read-only link to one flow's wall (needs MEDIAFLOW_TOKEN set)",
            WRITE,
            {"201": answer("The link.", ref("Link"))} | errors(400, 401, 403, 404, 409, 413),
            parameters=[FLOW],
            requestBody={
                "required": False,
                "description": f"empty, or this object (at most {links.MAX_BODY} bytes)",
                "content": {JSON: {"schema": obj({}, {"expires_in_s": lifetime})}},
            },
        )
    }
    return paths


def _api_ops() -> Schema:
    # path: (summary, security, 200's schema, other statuses)
    reads: dict[str, tuple[str, list[Schema], str, tuple[int, ...]]] = {
        "/api/flows": ("Flows run here or known to the store", LINK_READ, "FlowList", (401,)),
        "/api/session": ("What this request may do", READ, "Session", (401, 403)),
        "/api/devices": ("Cameras and microphones here", READ, "Devices", (401, 403, 503)),
    }
    paths: Schema = {}
    for path, (summary, security, body, more) in reads.items():
        answers = {"200": answer("OK.", ref(body))} | errors(*more)
        paths[path] = {"get": op(summary, security, answers)}
    after = string("^[0-9]{0,18}$")
    types = (
        f"comma-separated event types to keep (at most {sse.MAX_TYPES}); a type neither"
        " mediaflow's nor already published here is refused with 400"
    )
    not_modified = answer("Not modified.")
    static = {"enum": [name for name in wall.STATIC_FILES if name != "index.html"]}
    scripts = {"text/javascript": {"schema": STR}, "text/css": {"schema": STR}}
    return paths | {
        "/api/flows/{flow}": {
            "get": op(
                "One flow: nodes, ports, latest values, backlog",
                LINK_READ,
                {"200": answer("The flow.", ref("FlowView"))} | errors(400, 401, 403, 404),
                parameters=[FLOW],
            )
        },
        "/api/events": {
            "get": op(
                "Server-sent events until the server stops (a link: its flow's only)",
                LINK_READ,
                {"200": text("text/event-stream", "Events.", ref("Event"))} | errors(400, 401),
                parameters=[
                    param("query", "types", string(r"^[A-Za-z0-9_.,\- ]*$"), types),
                    param("query", "after", after, "events after this id (as Last-Event-ID)"),
                    param("header", "Last-Event-ID", after, "resume after this id"),
                ],
            )
        },
        "/metrics": {
            "get": op(
                "Prometheus metrics",
                READ,
                {"200": text("text/plain", "Metrics.")} | errors(401, 403, 503),
            )
        },
        "/healthz": {
            "get": op(
                "Liveness and queue reachability (never locked)",
                [],
                {
                    "200": answer("Up, queue answering.", ref("Health")),
                    "503": answer("No queue, or it does not answer.", ref("Health")),
                },
            )
        },
        "/openapi.json": {
            "get": op(
                "This document",
                READ,
                {"200": answer("OpenAPI 3.1.", {"type": "object"})} | errors(401, 403),
            )
        },
        "/": {
            "get": op(
                "The wall; ?token= or ?link= sets its cookie and redirects here",
                LINK_READ,
                {
                    "200": text("text/html", "The wall."),
                    "303": answer("Cookie set.", headers={"Location": header("^/$")}),
                    "304": not_modified,
                }
                | errors(401),
                parameters=[
                    param("query", "token", STR, "MEDIAFLOW_TOKEN: sets the wall cookie"),
                    param("query", "link", STR, "a wall link: sets the link cookie"),
                    param("header", "If-None-Match", STR, "304 with the page's ETag"),
                ],
            )
        },
        "/static/{name}": {
            "get": op(
                "The wall's scripts and style",
                LINK_READ,
                {"200": {"description": "The file.", "content": scripts}, "304": not_modified}
                | errors(401, 404),
                parameters=[
                    param("path", "name", static),
                    param("header", "If-None-Match", STR, "304 with the file's ETag"),
                ],
            )
        },
        "/favicon.ico": {"get": op("No icon", LINK_READ, {"204": answer("None.")} | errors(401))},
    }


def _live_ops() -> Schema:
    node = param("path", "node", string(f"^{NAME_PATTERN}$"), example="cam")
    seq = param("path", "seq", string("^[0-9]+$"), "the part's number")
    number = string("^[0-9]{1,18}$")
    after = param("query", "after", number, "hold the answer for a newer part")
    msn_query = param("query", "_HLS_msn", number, "hold the answer until this segment is finished")
    part_query = param("query", "_HLS_part", number, "with _HLS_msn: until this part of it exists")
    segment_number = param("path", "msn", string("^[0-9]+$"), "the segment's media sequence number")
    live = [FLOW, node]
    gone = errors(400, 401, 403, 404, 503)
    return {
        "/live/{flow}/{node}.m3u8": {
            "get": op(
                "A camera's live HLS playlist (segments and their parts, capture times)",
                READ,
                {"200": text("application/vnd.apple.mpegurl", "The playlist.")} | gone,
                parameters=[*live, after, msn_query, part_query],
            )
        },
        "/live/{flow}/{node}/init.mp4": {
            "get": op(
                "The live stream's init segment",
                READ,
                {"200": {"description": "ftyp + moov.", "content": {"video/mp4": BINARY}}} | gone,
                parameters=live,
            )
        },
        "/live/{flow}/{node}/{seq}.m4s": {
            "get": op(
                "One live part, while it is in the window",
                READ,
                {"200": {"description": "moof + mdat.", "content": {"video/iso.segment": BINARY}}}
                | gone,
                parameters=[*live, seq],
            )
        },
        "/live/{flow}/{node}/segment/{msn}.m4s": {
            "get": op(
                "One finished live segment (a group of pictures), while it is in the window",
                READ,
                {"200": {"description": "Its parts.", "content": {"video/iso.segment": BINARY}}}
                | gone,
                parameters=[*live, segment_number],
            )
        },
    }


def _version() -> str:
    try:
        return metadata.version("mediaflow")
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        return "0+unknown"


def document(settings: ServerSettings) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the app serving with ``settings``. Pure."""
    paths = _api_ops() | _flow_ops(settings) | _live_ops() | timeline_ops()
    paths |= whip_ops() | whep_ops()
    paths["/artifacts"] = {"put": _upload(digest=False)}
    paths["/artifacts/{digest}"] = _artifact_ops() | {"put": _upload(digest=True)}
    return {
        "openapi": "3.1.0",
        "info": {"title": "mediaflow", "version": _version(), "description": DESCRIPTION},
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": component_schemas() | timeline_schemas(),
            "responses": ERRORS,
            "securitySchemes": SECURITY_SCHEMES,
        },
    }


async def serve_document(request: web.Request) -> web.StreamResponse:
    """``GET /openapi.json``: the document, built with the app."""
    headers = {"Cache-Control": "no-cache"}
    return web.Response(body=request.app[DOCUMENT], content_type=JSON, headers=headers)


def add_routes(app: web.Application) -> None:
    app[DOCUMENT] = json.dumps(document(app[STATE].settings), indent=1).encode()
    app.router.add_get("/openapi.json", serve_document)
