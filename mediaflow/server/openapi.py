"""``GET /openapi.json``: the HTTP API described as an OpenAPI 3.1 document.

:func:`document` builds it from the constants the handlers use (the name and
digest patterns, limits, the wall's file names, the link lifetime this server
allows), so the two cannot drift apart silently; ``tests/test_http_openapi.py``
checks that every route the app registers is described and fuzzes a live
server against the document with schemathesis. The JSON is built once, when
the app is, and served from memory.

The document is a read like any other: with ``MEDIAFLOW_LOCK_READS=1`` it
needs the token (or the wall's cookie), and a wall link does not open it.
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any

from aiohttp import web

from mediaflow.flows.spec import NAME_PATTERN
from mediaflow.media import DIGEST_RE
from mediaflow.server import control, links, linktoken, sse, uploads, wall
from mediaflow.server.settings import ServerSettings
from mediaflow.server.state import STATE

Schema = dict[str, Any]

JSON = "application/json"
DIGEST_PATTERN = f"^{DIGEST_RE.pattern}$"
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


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _null(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _list(schema: Schema) -> Schema:
    return {"type": "array", "items": schema}


def _obj(required: Schema, optional: Schema | None = None, about: str = "") -> Schema:
    """A closed object: exactly these properties, the ``required`` ones always there."""
    schema = {
        "type": "object",
        "properties": {**required, **(optional or {})},
        "required": list(required),
        "additionalProperties": False,
    }
    return schema | {"description": about} if about else schema


def _map(schema: Schema) -> Schema:
    return {"type": "object", "additionalProperties": schema}


def _string(pattern: str) -> Schema:
    return {"type": "string", "pattern": pattern}


STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer", "minimum": 0}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
KIND: Schema = {"enum": ["image", "audio", "video", "text", "number", "json"]}
STATUS: Schema = {"enum": ["running", "paused", "disabled", "stopping"]}
QUEUE: Schema = {"enum": ["ok", "unavailable"]}
ITEM_KIND: Schema = {"enum": ["emission", "source"]}
ITEM: Schema = {"flow": STR, "node": STR, "entry_id": STR, "seq": INT, "deliveries": INT}
LINK_REASONS = ["invalid_link", "malformed", "bad_signature", "expired"]


def _schemas() -> dict[str, Schema]:
    """The JSON bodies as :mod:`.views` and the handlers build them."""
    output = _obj(
        {"kind": KIND, "latest": {}},
        {"seq": INT, "item": INT},
        "`seq` (and `item`) say which emission `latest` is",
    )
    event_json = {
        "type": "object",
        "properties": {"id": INT, "type": STR, "time": NUM},
        "required": ["id", "type", "time"],
    }
    return {
        "Error": _obj(
            {"error": STR},
            {"reason": {"enum": LINK_REASONS}, "flow": STR},
            "Every JSON error; a refused wall link adds `reason` (401) or its `flow` (403).",
        ),
        "MediaRef": _obj(
            {"digest": _string(DIGEST_PATTERN), "media_type": STR, "size": INT}
            | {"meta": {"type": "object"}}
        ),
        "Run": _null(
            _obj(
                {"run_id": STR, "started_at": NUM, "heartbeat_at": _null(NUM)}
                | {"ended_at": _null(NUM), "outcome": _null(STR)}
            )
        ),
        "Backlog": _obj(
            {"items": INT, "ready": INT, "pending": INT, "delayed": INT, "oldest_s": _null(NUM)}
        ),
        "FlowSummary": _obj(
            {"name": STR, "live": BOOL, "status": _null(STATUS), "nodes": INT, "ports": INT}
            | {"backlog": INT, "run": _ref("Run")}
        ),
        "FlowList": _obj({"flows": _list(_ref("FlowSummary")), "queue": QUEUE}),
        "Node": _obj(
            {"id": STR, "role": {"enum": ["source", "node", None]}, "class": _null(STR)}
            | {"inputs": _map(_obj({"kind": KIND, "from": _null(STR)}))}
            | {"outputs": _map(output)}
            | {"in_memory": _null(_obj({"waiting": INT, "running": BOOL}))}
            | {"backlog": _ref("Backlog")},
            {"live": _string("^/live/[^/]+/[^/]+$")},
            "`live`: where a camera of this process plays live (/live/{flow}/{node}.m3u8)",
        ),
        "FlowView": _obj(
            {"name": STR, "live": BOOL, "status": _null(STATUS), "run": _ref("Run")}
            | {"nodes": _list(_ref("Node")), "queue": QUEUE}
            | {"edges": _list(_obj({"from": STR, "to": STR}))},
            {"paused": BOOL, "disabled": BOOL, "stopping": BOOL},
        ),
        "FlowState": _obj(
            {"flow": STR, "status": STATUS, "paused": BOOL, "disabled": BOOL, "stopping": BOOL}
            | {"changed": BOOL, "run_id": _null(STR), "in_memory": INT, "finished_items": INT},
            {"stepped": _null(_obj(ITEM | {"enqueued_at": NUM}))},
            "`stepped` (step only): the item it started, null if none waited",
        ),
        "Item": _obj(ITEM | {"kind": ITEM_KIND, "enqueued_at": NUM}),
        "DeadLetter": _obj(
            {"id": STR, "node": STR, "seq": INT, "entry_id": STR, "deliveries": INT}
            | {"kind": ITEM_KIND, "reason": STR, "dead_at": NUM, "dead_at_iso": _string("Z$")}
            | {"payload_preview": STR, "payload_truncated": BOOL}
        ),
        "DeadLetters": _obj({"flow": STR, "dead_letters": _list(_ref("DeadLetter"))}),
        "Requeued": _obj({"flow": STR, "id": STR, "requeued": _ref("Item")}),
        "Link": _obj(
            {"link": _string(rf"^{linktoken.PREFIX}\."), "url": STR, "path": STR, "flow": STR}
            | {"issued_at": NUM, "expires_at": NUM, "expires_in_s": NUM, "reads_locked": BOOL}
        ),
        "Event": _obj(
            {"event": _string(r"^[A-Za-z_][A-Za-z0-9_.-]*$")}
            | {"data": STR | {"contentMediaType": JSON, "contentSchema": event_json}},
            {"id": _string("^[1-9][0-9]*$")},
            "One server-sent event: `event` is its type, `data` the event as JSON (`id`, "
            "`type`, `time` and its fields); `events_dropped` (missed events) has no `id`",
        ),
        "Session": _obj({"token_required": BOOL, "read": BOOL, "write": BOOL}),
        "Health": _obj(
            {"ok": BOOL, "queue": {"enum": ["ok", "unavailable", "none"]}}, {"error": STR}
        ),
        "Devices": _obj(
            {"cameras": _list({"type": "object"}), "microphones": _list({"type": "object"})}
            | {"errors": _list(_obj({"source": STR, "type": STR, "message": STR}))}
        ),
    }


def _header(pattern: str | None = None, about: str = "") -> Schema:
    schema = STR if pattern is None else _string(pattern)
    return {"required": True, "schema": schema, "description": about}


def _answer(about: str, body: Schema | None = None, headers: Schema | None = None) -> Schema:
    """A response: JSON ``body`` (a schema) if given, and required ``headers``."""
    answer: Schema = {"description": about}
    if body is not None:
        answer["content"] = {JSON: {"schema": body}}
    if headers:
        answer["headers"] = headers
    return answer


def _errors(*statuses: int) -> Schema:
    return {str(status): {"$ref": f"#/components/responses/{status}"} for status in statuses}


ERROR = _ref("Error")
ERRORS = {
    "400": _answer("Malformed request: a parameter, header or body the server refuses.", ERROR),
    "401": _answer(
        "No valid credential: the token is needed (writes; reads when locked), or the wall "
        "link presented is malformed, forged or expired (`reason`).",
        ERROR,
        {"WWW-Authenticate": _header(r'^(Bearer|Link) realm="mediaflow"')},
    ),
    "403": _answer("A wall link where it opens nothing (links never write).", ERROR),
    "404": _answer("Nothing by that name.", ERROR),
    "409": _answer("The flow's state (or the server's setup) forbids this request.", ERROR),
    "413": _answer("The body is larger than allowed.", ERROR),
    "503": _answer("The work queue (or the feature) is unavailable here.", ERROR),
}
# What every answer about an existing artifact carries (200, 206, 304, 412, 416).
ARTIFACT_HEADERS = {
    "ETag": _header(r'^"sha256:[0-9a-f]{64}"$', "the digest: a strong validator"),
    "Last-Modified": _header(about="when the store wrote it"),
    "Accept-Ranges": _header("^bytes$"),
    "Cache-Control": _header("^(public|private), max-age=31536000, immutable$"),
    "X-Content-Type-Options": _header("^nosniff$"),
    "Content-Security-Policy": _header("^sandbox$"),
}
BINARY: Schema = {"schema": {"type": "string", "format": "binary"}}
ARTIFACT_TYPES = ["image/*", "audio/*", "video/*", "text/plain", "application/octet-stream"]
UPLOAD_TYPES = ["application/octet-stream", "image/jpeg", "image/png", "audio/wav", "video/mp4"]
UPLOAD_TYPES += ["video/webm", "text/plain"]


def _param(where: str, name: str, schema: Schema | None, about: str = "", **more: Any) -> Schema:
    """A parameter; ``schema=None`` when ``more`` describes it by ``content``."""
    param = {"name": name, "in": where, "required": where == "path", **more}
    if schema is not None:
        param["schema"] = schema
    return param | {"description": about} if about else param


FLOW = _param("path", "flow", _string(f"^{NAME_PATTERN}$"), example="desk")
DIGEST = _param("path", "digest", _string(DIGEST_PATTERN))
# Reads: open unless MEDIAFLOW_LOCK_READS=1; then the token or the wall cookie, and for
# what a wall link opens, the link (header or cookie). Writes: the token when one is set.
READ: list[Schema] = [{}, {"bearer": []}, {"wallCookie": []}]
LINK_READ: list[Schema] = [*READ, {"link": []}, {"linkCookie": []}]
WRITE: list[Schema] = [{"bearer": []}]


def _op(summary: str, security: list[Schema], responses: Schema, **more: Any) -> Schema:
    return {"summary": summary, "security": security, "responses": responses, **more}


def _artifact_ops() -> Schema:
    params = [
        DIGEST,
        _param("query", "type", STR, "serve as: image/*, audio/*, video/*, octet-stream"),
        _param("header", "Range", STR, "one range, bytes= (others are ignored: 200)"),
        _param("header", "If-Range", STR, "the ETag or the exact Last-Modified date"),
        _param("header", "If-None-Match", STR, "304 when it matches the ETag"),
        _param("header", "If-Match", STR, "412 unless it matches the ETag"),
        _param("header", "If-Modified-Since", STR, "304 when not modified since"),
        _param("header", "If-Unmodified-Since", STR, "412 when modified since"),
    ]
    content = {media: BINARY for media in ARTIFACT_TYPES}
    ranged = ARTIFACT_HEADERS | {"Content-Range": _header(r"^bytes \d+-\d+/\d+$")}
    unsatisfiable = ARTIFACT_HEADERS | {"Content-Range": _header(r"^bytes \*/\d+$")}
    answers = {
        "200": _answer("The bytes.", headers=ARTIFACT_HEADERS) | {"content": content},
        "206": _answer("The one range asked for.", headers=ranged) | {"content": content},
        "304": _answer("Not modified.", headers=ARTIFACT_HEADERS),
        **_errors(400, 401, 403, 404),
        "412": _answer("A precondition failed.", ERROR, ARTIFACT_HEADERS),
        "416": _answer("No byte of the range is in the artifact.", ERROR, unsatisfiable),
    }
    # RFC 9110 14.2: Range is defined for GET only, so a HEAD ignores it (and If-Range).
    head = {
        code: {key: value for key, value in answer.items() if key != "content"}
        for code, answer in answers.items()
        if code not in ("206", "416")
    }
    return {
        "get": _op("An artifact's bytes", LINK_READ, answers, parameters=params),
        "head": _op("An artifact's headers (Range ignored)", LINK_READ, head, parameters=params),
    }


def _upload(digest: bool) -> Schema:
    meta = _param(
        "header",
        uploads.META_HEADER,
        None,
        f"the reference's meta: a JSON object, at most {uploads.MAX_META_BYTES} bytes",
        content={JSON: {"schema": {"type": "object"}}},
    )
    location = {"Location": _header(r"^/artifacts/sha256:[0-9a-f]{64}$")}
    return _op(
        "Store a body" + (", only if it has this digest" if digest else ""),
        WRITE,
        {
            "201": _answer("Stored (or there already).", _ref("MediaRef"), location),
            **_errors(400, 401, 403, 413),
            "415": _answer("Content-Type is not one the store keeps.", ERROR),
            "417": _answer("An Expect other than 100-continue.", ERROR),
            "507": _answer("The store's disk is full; nothing stored.", ERROR),
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
            params.append(_param("query", "wait_s", wait, "how long to wait for an item"))
        answers = {"200": _answer("The flow's new state.", _ref("FlowState"))}
        summary = f"{action.capitalize()} a flow this process runs"
        answers |= _errors(400, 401, 403, 404, 409, 503)
        paths[f"/api/flows/{{flow}}/{action}"] = {
            "post": _op(summary, WRITE, answers, parameters=params)
        }
    dead = [FLOW, _param("path", "id", {"type": "string", "minLength": 1})]
    limit = {"type": "integer", "minimum": 1, "maximum": control.MAX_DEAD_LETTER_LIMIT}
    refusals = _errors(400, 401, 403, 404, 503)
    paths["/api/flows/{flow}/dead-letters"] = {
        "get": _op(
            "A flow's dead letters, newest first",
            READ,
            {"200": _answer("Its dead letters.", _ref("DeadLetters"))} | refusals,
            parameters=[FLOW, _param("query", "limit", limit, "at most this many")],
        )
    }
    paths["/api/flows/{flow}/dead-letters/{id}/requeue"] = {
        "post": _op(
            "Put a dead letter back at the end of its stream",
            WRITE,
            {"200": _answer("Requeued.", _ref("Requeued"))} | refusals,
            parameters=dead,
        )
    }
    paths["/api/flows/{flow}/dead-letters/{id}"] = {
        "delete": _op(
            "Discard a dead letter",
            WRITE,
            {"204": _answer("Discarded.")} | refusals,
            parameters=dead,
        )
    }
    lifetime = {"type": "number", "minimum": 1, "maximum": settings.link_max_s}
    paths["/api/flows/{flow}/links"] = {
        "post": _op(
            "A signed read-only link to one flow's wall (needs MEDIAFLOW_TOKEN set)",
            WRITE,
            {"201": _answer("The link.", _ref("Link"))} | _errors(400, 401, 403, 404, 409, 413),
            parameters=[FLOW],
            requestBody={
                "required": False,
                "description": f"empty, or this object (at most {links.MAX_BODY} bytes)",
                "content": {JSON: {"schema": _obj({}, {"expires_in_s": lifetime})}},
            },
        )
    }
    return paths


def _text(media_type: str, about: str, schema: Schema = STR) -> Schema:
    return {"description": about, "content": {media_type: {"schema": schema}}}


def _api_ops() -> Schema:
    # path: (summary, security, 200's schema, other statuses)
    reads: dict[str, tuple[str, list[Schema], str, tuple[int, ...]]] = {
        "/api/flows": ("Flows run here or known to the store", LINK_READ, "FlowList", (401,)),
        "/api/session": ("What this request may do", READ, "Session", (401, 403)),
        "/api/devices": ("Cameras and microphones here", READ, "Devices", (401, 403, 503)),
    }
    paths: Schema = {}
    for path, (summary, security, body, more) in reads.items():
        answers = {"200": _answer("OK.", _ref(body))} | _errors(*more)
        paths[path] = {"get": _op(summary, security, answers)}
    after = _string("^[0-9]{0,18}$")
    types = f"comma-separated event types to keep (at most {sse.MAX_TYPES})"
    not_modified = _answer("Not modified.")
    static = {"enum": [name for name in wall.STATIC_FILES if name != "index.html"]}
    scripts = {"text/javascript": {"schema": STR}, "text/css": {"schema": STR}}
    return paths | {
        "/api/flows/{flow}": {
            "get": _op(
                "One flow: nodes, ports, latest values, backlog",
                LINK_READ,
                {"200": _answer("The flow.", _ref("FlowView"))} | _errors(400, 401, 403, 404),
                parameters=[FLOW],
            )
        },
        "/api/events": {
            "get": _op(
                "Server-sent events until the server stops (a link: its flow's only)",
                LINK_READ,
                {"200": _text("text/event-stream", "Events.", _ref("Event"))} | _errors(400, 401),
                parameters=[
                    _param("query", "types", _string(r"^[A-Za-z0-9_.,\- ]*$"), types),
                    _param("query", "after", after, "events after this id (as Last-Event-ID)"),
                    _param("header", "Last-Event-ID", after, "resume after this id"),
                ],
            )
        },
        "/metrics": {
            "get": _op(
                "Prometheus metrics",
                READ,
                {"200": _text("text/plain", "Metrics.")} | _errors(401, 403, 503),
            )
        },
        "/healthz": {
            "get": _op(
                "Liveness and queue reachability (never locked)",
                [],
                {
                    "200": _answer("Up, queue answering.", _ref("Health")),
                    "503": _answer("No queue, or it does not answer.", _ref("Health")),
                },
            )
        },
        "/openapi.json": {
            "get": _op(
                "This document",
                READ,
                {"200": _answer("OpenAPI 3.1.", {"type": "object"})} | _errors(401, 403),
            )
        },
        "/": {
            "get": _op(
                "The wall; ?token= or ?link= sets its cookie and redirects here",
                LINK_READ,
                {
                    "200": _text("text/html", "The wall."),
                    "303": _answer("Cookie set.", headers={"Location": _header("^/$")}),
                    "304": not_modified,
                }
                | _errors(401),
                parameters=[
                    _param("query", "token", STR, "MEDIAFLOW_TOKEN: sets the wall cookie"),
                    _param("query", "link", STR, "a wall link: sets the link cookie"),
                    _param("header", "If-None-Match", STR, "304 with the page's ETag"),
                ],
            )
        },
        "/static/{name}": {
            "get": _op(
                "The wall's scripts and style",
                LINK_READ,
                {"200": {"description": "The file.", "content": scripts}, "304": not_modified}
                | _errors(401, 404),
                parameters=[
                    _param("path", "name", static),
                    _param("header", "If-None-Match", STR, "304 with the file's ETag"),
                ],
            )
        },
        "/favicon.ico": {
            "get": _op("No icon", LINK_READ, {"204": _answer("None.")} | _errors(401))
        },
    }


SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "MEDIAFLOW_TOKEN: every write when set; reads too when locked.",
    },
    "wallCookie": {
        "type": "apiKey",
        "in": "cookie",
        "name": "mediaflow_wall",
        "description": "Set by GET /?token=...: opens reads, never writes.",
    },
    "link": {
        "type": "http",
        "scheme": "Link",
        "description": "A wall link: reads one flow's wall, view, events and artifacts.",
    },
    "linkCookie": {
        "type": "apiKey",
        "in": "cookie",
        "name": links.LINK_COOKIE,
        "description": "Set by GET /?link=...: as the Link scheme.",
    },
}


def _live_ops() -> Schema:
    node = _param("path", "node", _string(f"^{NAME_PATTERN}$"), example="cam")
    seq = _param("path", "seq", _string("^[0-9]+$"), "the part's number")
    after = _param("query", "after", _string("^[0-9]+$"), "hold the answer for a newer part")
    live = [FLOW, node]
    gone = _errors(400, 401, 403, 404, 503)
    return {
        "/live/{flow}/{node}.m3u8": {
            "get": _op(
                "A camera's live HLS playlist (fMP4 parts, capture times)",
                READ,
                {"200": _text("application/vnd.apple.mpegurl", "The playlist.")} | gone,
                parameters=[*live, after],
            )
        },
        "/live/{flow}/{node}/init.mp4": {
            "get": _op(
                "The live stream's init segment",
                READ,
                {"200": {"description": "ftyp + moov.", "content": {"video/mp4": BINARY}}} | gone,
                parameters=live,
            )
        },
        "/live/{flow}/{node}/{seq}.m4s": {
            "get": _op(
                "One live part, while it is in the window",
                READ,
                {"200": {"description": "moof + mdat.", "content": {"video/iso.segment": BINARY}}}
                | gone,
                parameters=[*live, seq],
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
    paths = _api_ops() | _flow_ops(settings) | _live_ops()
    paths["/artifacts"] = {"put": _upload(digest=False)}
    paths["/artifacts/{digest}"] = _artifact_ops() | {"put": _upload(digest=True)}
    return {
        "openapi": "3.1.0",
        "info": {"title": "mediaflow", "version": _version(), "description": DESCRIPTION},
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": _schemas(),
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
