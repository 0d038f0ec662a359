"""The timeline's part of the OpenAPI document (:mod:`.recordings`): its paths and
the schemas of its answers."""

from __future__ import annotations

from mediaflow.flows.spec import NAME_PATTERN
from mediaflow.server.openapi_parts import (
    BOOL,
    FLOW,
    INT,
    LINK_READ,
    NUM,
    STR,
    Schema,
    answer,
    array,
    errors,
    nullable,
    obj,
    op,
    param,
    ref,
    string,
)
from mediaflow.server.recordings import MAX_EVENTS

TIME_ABOUT = "ISO 8601 (UTC when it names no zone) or seconds since the epoch"
NAMES = string(f"^{NAME_PATTERN}(,{NAME_PATTERN})*$")
SPAN_TIMES: Schema = {"start": NUM, "end": NUM, "start_iso": STR, "end_iso": STR}


def timeline_schemas() -> dict[str, Schema]:
    media_ref = obj({"digest": STR, "media_type": STR, "size": INT}, {"meta": {"type": "object"}})
    event = obj(
        {"flow": STR, "node": STR, "type": STR, "phase": {"enum": ["start", "end"]}}
        | {"source": STR, "start": NUM, "end": nullable(NUM), "length": nullable(NUM)}
        | {"score": NUM, "zone": nullable(STR), "text": nullable(STR)}
        | {"snapshot": nullable(media_ref)},
        about="An event: `end` and `length` are null while it lasts; times are seconds "
        "since the epoch (the capture clock)",
    )
    clip = obj({"digest": STR, "media_type": STR, "size": INT, "start": NUM, "end": NUM})
    return {
        "TimelineEvent": event,
        "RecorderList": obj({"flow": STR, "recorders": array(STR)}),
        "RecordingTimeline": obj(
            {"flow": STR, "node": STR, **SPAN_TIMES, "recorded_s": NUM, "sources": array(STR)}
            | {"spans": array(obj({**SPAN_TIMES, "clips": array(clip)}))}
            | {"gaps": array(obj({**SPAN_TIMES, "reason": {"enum": ["not recorded", "evicted"]}}))}
            | {"events": array(ref("TimelineEvent"))},
            about="A recorder's clips as spans and gaps in the asked range, and the events "
            "of the camera and microphone it records",
        ),
        "TimelineEvents": obj(
            {"flow": STR, "start": NUM, "end": NUM, "events": array(ref("TimelineEvent"))}
            | {"truncated": BOOL}
        ),
    }


def timeline_ops() -> Schema:
    node = param("path", "node", string(f"^{NAME_PATTERN}$"), "a recorder node", example="rec")
    start = param("query", "start", STR, f"{TIME_ABOUT}; an hour before end by default")
    end = param("query", "end", STR, f"{TIME_ABOUT}; now by default")
    types = param("query", "type", string("^[a-z][a-z0-9_]*(,[a-z][a-z0-9_]*)*$"), "event types")
    sources = param("query", "source", NAMES, "capturing nodes the events are about")
    limit = param("query", "limit", {"type": "integer", "minimum": 1, "maximum": MAX_EVENTS})
    return {
        "/api/recordings/{flow}": {
            "get": op(
                "The flow's recorder nodes that kept a clip",
                LINK_READ,
                {"200": answer("Recorders.", ref("RecorderList"))} | errors(400, 401),
                parameters=[FLOW],
            )
        },
        "/api/recordings/{flow}/{node}": {
            "get": op(
                "A recorder's spans, gaps and events in a time range",
                LINK_READ,
                {"200": answer("The timeline.", ref("RecordingTimeline"))} | errors(400, 401, 404),
                parameters=[FLOW, node, start, end],
            )
        },
        "/api/flows/{flow}/events": {
            "get": op(
                "The events noted in a flow (motion, loudness, transcripts), oldest first",
                LINK_READ,
                {"200": answer("Events.", ref("TimelineEvents"))} | errors(400, 401),
                parameters=[FLOW, start, end, types, sources, limit],
            )
        },
    }
