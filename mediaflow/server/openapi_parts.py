"""The vocabulary of :mod:`.openapi`'s document: schema builders, the JSON bodies'
schemas, the shared responses, parameters and security schemes.

Kept apart from the paths so that each half reads on its own: this one says what
the bodies and credentials look like, :mod:`.openapi` which route answers what.
Pure data and pure functions.
"""

from __future__ import annotations

from typing import Any

from mediaflow.engine.event_types import EVENT_TYPES
from mediaflow.flows.spec import NAME_PATTERN
from mediaflow.media import DIGEST_RE
from mediaflow.server import links, linktoken

Schema = dict[str, Any]

JSON = "application/json"
DIGEST_PATTERN = f"^{DIGEST_RE.pattern}$"


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def array(schema: Schema) -> Schema:
    return {"type": "array", "items": schema}


def obj(required: Schema, optional: Schema | None = None, about: str = "") -> Schema:
    """A closed object: exactly these properties, the ``required`` ones always there."""
    schema = {
        "type": "object",
        "properties": {**required, **(optional or {})},
        "required": list(required),
        "additionalProperties": False,
    }
    return schema | {"description": about} if about else schema


def mapping(schema: Schema) -> Schema:
    return {"type": "object", "additionalProperties": schema}


def string(pattern: str) -> Schema:
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


def component_schemas() -> dict[str, Schema]:
    """The JSON bodies as :mod:`.views` and the handlers build them."""
    output = obj(
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
        "Error": obj(
            {"error": STR},
            {"reason": {"enum": LINK_REASONS}, "flow": STR},
            "Every JSON error; a refused wall link adds `reason` (401) or its `flow` (403).",
        ),
        "MediaRef": obj(
            {"digest": string(DIGEST_PATTERN), "media_type": STR, "size": INT}
            | {"meta": {"type": "object"}}
        ),
        "Run": nullable(
            obj(
                {"run_id": STR, "started_at": NUM, "heartbeat_at": nullable(NUM)}
                | {"ended_at": nullable(NUM), "outcome": nullable(STR)}
            )
        ),
        "Backlog": obj(
            {"items": INT, "ready": INT, "pending": INT, "delayed": INT, "oldest_s": nullable(NUM)}
        ),
        "FlowSummary": obj(
            {"name": STR, "live": BOOL, "status": nullable(STATUS), "nodes": INT, "ports": INT}
            | {"backlog": INT, "run": ref("Run")}
        ),
        "FlowList": obj({"flows": array(ref("FlowSummary")), "queue": QUEUE}),
        "Node": obj(
            {"id": STR, "role": {"enum": ["source", "node", None]}, "class": nullable(STR)}
            | {"inputs": mapping(obj({"kind": KIND, "from": nullable(STR)}))}
            | {"outputs": mapping(output)}
            | {"in_memory": nullable(obj({"waiting": INT, "running": BOOL}))}
            | {"backlog": ref("Backlog")},
            {"live": string("^/live/[^/]+/[^/]+$")},
            "`live`: where a camera of this process plays live (/live/{flow}/{node}.m3u8)",
        ),
        "FlowView": obj(
            {"name": STR, "live": BOOL, "status": nullable(STATUS), "run": ref("Run")}
            | {"nodes": array(ref("Node")), "queue": QUEUE}
            | {"edges": array(obj({"from": STR, "to": STR}))},
            {"paused": BOOL, "disabled": BOOL, "stopping": BOOL, "forward": ref("Forward")},
        ),
        "Forward": obj(
            {"link_up": BOOL, "backlog_items": INT, "backlog_s": NUM, "backlog_bytes": INT}
            | {"forwarded_items": INT}
            | {"forwarded_bytes": INT, "lost_items": INT, "last_forward_at": nullable(NUM)},
            about="An edge box's forwarding of the flow: the link, what waits here for it"
            " (items, the bytes of their artifacts, and the age of the oldest in seconds),"
            " what went, what was lost",
        ),
        "FlowState": obj(
            {"flow": STR, "status": STATUS, "paused": BOOL, "disabled": BOOL, "stopping": BOOL}
            | {"changed": BOOL, "run_id": nullable(STR), "in_memory": INT, "finished_items": INT},
            {"stepped": nullable(obj(ITEM | {"enqueued_at": NUM}))},
            "`stepped` (step only): the item it started, null if none waited",
        ),
        "Item": obj(ITEM | {"kind": ITEM_KIND, "enqueued_at": NUM}),
        "DeadLetter": obj(
            {"id": STR, "node": STR, "seq": INT, "entry_id": STR, "deliveries": INT}
            | {"kind": ITEM_KIND, "reason": STR, "dead_at": NUM, "dead_at_iso": string("Z$")}
            | {"payload_preview": STR, "payload_truncated": BOOL}
        ),
        "DeadLetters": obj({"flow": STR, "dead_letters": array(ref("DeadLetter"))}),
        "Requeued": obj({"flow": STR, "id": STR, "requeued": ref("Item")}),
        "Link": obj(
            {"link": string(rf"^{linktoken.PREFIX}\."), "url": STR, "path": STR, "flow": STR}
            | {"issued_at": NUM, "expires_at": NUM, "expires_in_s": NUM, "reads_locked": BOOL}
        ),
        "Event": obj(
            {"event": string(r"^[A-Za-z_][A-Za-z0-9_.-]*$") | {"examples": list(EVENT_TYPES)}}
            | {"data": STR | {"contentMediaType": JSON, "contentSchema": event_json}},
            {"id": string("^[1-9][0-9]*$")},
            "One server-sent event: `event` is its type, `data` the event as JSON (`id`, "
            "`type`, `time` and its fields); `events_dropped` (missed events) has no `id`. "
            "mediaflow's own types: " + ", ".join(f"`{name}`" for name in EVENT_TYPES) + " "
            "(docs/http-api.md lists their fields); a node may publish its own",
        ),
        "Session": obj({"token_required": BOOL, "read": BOOL, "write": BOOL}),
        "Health": obj(
            {"ok": BOOL, "queue": {"enum": ["ok", "unavailable", "none"]}}, {"error": STR}
        ),
        "Devices": obj(
            {"cameras": array({"type": "object"}), "microphones": array({"type": "object"})}
            | {"errors": array(obj({"source": STR, "type": STR, "message": STR}))}
        ),
    }


def header(pattern: str | None = None, about: str = "") -> Schema:
    schema = STR if pattern is None else string(pattern)
    return {"required": True, "schema": schema, "description": about}


def answer(about: str, body: Schema | None = None, headers: Schema | None = None) -> Schema:
    """A response: JSON ``body`` (a schema) if given, and required ``headers``."""
    answer: Schema = {"description": about}
    if body is not None:
        answer["content"] = {JSON: {"schema": body}}
    if headers:
        answer["headers"] = headers
    return answer


def errors(*statuses: int) -> Schema:
    return {str(status): {"$ref": f"#/components/responses/{status}"} for status in statuses}


ERROR = ref("Error")
ERRORS = {
    "400": answer("Malformed request: a parameter, header or body the server refuses.", ERROR),
    "401": answer(
        "No valid credential: the token is needed (writes; reads when locked), or the wall "
        "link presented is malformed, forged or expired (`reason`).",
        ERROR,
        {"WWW-Authenticate": header(r'^(Bearer|Link) realm="mediaflow"')},
    ),
    "403": answer("A wall link where it opens nothing (links never write).", ERROR),
    "404": answer("Nothing by that name.", ERROR),
    "409": answer("The flow's state (or the server's setup) forbids this request.", ERROR),
    "413": answer("The body is larger than allowed.", ERROR),
    "503": answer("The work queue (or the feature) is unavailable here.", ERROR),
}
# What every answer about an existing artifact carries (200, 206, 304, 412, 416).
ARTIFACT_HEADERS = {
    "ETag": header(r'^"sha256:[0-9a-f]{64}"$', "the digest: a strong validator"),
    "Last-Modified": header(about="when the store wrote it"),
    "Accept-Ranges": header("^bytes$"),
    "Cache-Control": header("^(public|private), max-age=31536000, immutable$"),
    "X-Content-Type-Options": header("^nosniff$"),
    "Content-Security-Policy": header("^sandbox$"),
}
BINARY: Schema = {"schema": {"type": "string", "format": "binary"}}
ARTIFACT_TYPES = ["image/*", "audio/*", "video/*", "text/plain", "application/octet-stream"]
UPLOAD_TYPES = ["application/octet-stream", "image/jpeg", "image/png", "audio/wav", "video/mp4"]
UPLOAD_TYPES += ["video/webm", "text/plain"]


def param(where: str, name: str, schema: Schema | None, about: str = "", **more: Any) -> Schema:
    """A parameter; ``schema=None`` when ``more`` describes it by ``content``."""
    param = {"name": name, "in": where, "required": where == "path", **more}
    if schema is not None:
        param["schema"] = schema
    return param | {"description": about} if about else param


FLOW = param("path", "flow", string(f"^{NAME_PATTERN}$"), example="desk")
DIGEST = param("path", "digest", string(DIGEST_PATTERN))
# Reads: open unless MEDIAFLOW_LOCK_READS=1; then the token or the wall cookie, and for
# what a wall link opens, the link (header or cookie). Writes: the token when one is set.
READ: list[Schema] = [{}, {"bearer": []}, {"wallCookie": []}]
LINK_READ: list[Schema] = [*READ, {"link": []}, {"linkCookie": []}]
WRITE: list[Schema] = [{"bearer": []}]


def op(summary: str, security: list[Schema], responses: Schema, **more: Any) -> Schema:
    return {"summary": summary, "security": security, "responses": responses, **more}


def text(media_type: str, about: str, schema: Schema = STR) -> Schema:
    return {"description": about, "content": {media_type: {"schema": schema}}}


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
