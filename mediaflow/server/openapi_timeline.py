"""The timeline's part of the OpenAPI document (:mod:`.recordings`): its paths and
the schemas of its answers."""

from __future__ import annotations

from mediaflow.flows.spec import NAME_PATTERN
from mediaflow.server.openapi_parts import (
    ARTIFACT_HEADERS,
    BINARY,
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
    header,
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
EXPORT_HEADERS: Schema = {
    "X-Mediaflow-Begins-At": header(r"^[0-9]+(\.[0-9]+)?$", "the wall-clock time of the file's 0"),
    "X-Mediaflow-Gaps": header(about="JSON: [[start, end], ...] closed up in the file"),
    "Content-Disposition": header(about="a file name"),
}
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
        "/api/recordings/{flow}/{node}/export.mp4": {
            "get": op(
                "One MP4 of a recorded range, packets copied (answered like an artifact)",
                LINK_READ,
                {
                    "200": {
                        "description": "The MP4, from the keyframe at or before start, with an"
                        " edit list so players begin at start; gaps closed up and listed.",
                        "content": {"video/mp4": BINARY},
                        "headers": ARTIFACT_HEADERS | EXPORT_HEADERS,
                    },
                    "206": {
                        "description": "A range of it.",
                        "content": {"video/mp4": BINARY},
                        "headers": ARTIFACT_HEADERS | EXPORT_HEADERS,
                    },
                }
                | errors(400, 401, 404, 409),
                parameters=[
                    FLOW,
                    node,
                    param("query", "start", STR, TIME_ABOUT, required=True),
                    param("query", "end", STR, TIME_ABOUT, required=True),
                ],
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
