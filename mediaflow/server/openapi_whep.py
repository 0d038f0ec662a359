"""The WebRTC live view's part of the OpenAPI document (:mod:`.whep`): its paths."""

from __future__ import annotations

from mediaflow.flows.spec import NAME_PATTERN
from mediaflow.server.openapi_parts import (
    ERROR,
    FLOW,
    LINK_READ,
    STR,
    Schema,
    answer,
    errors,
    header,
    op,
    param,
    string,
    text,
)
from mediaflow.server.whep import MAX_OFFER, SDP_TYPE


def whep_ops() -> Schema:
    node = param("path", "node", string(f"^{NAME_PATTERN}$"), example="cam")
    session = param("path", "session", string("^[A-Za-z0-9_-]+$"), "from the offer's Location")
    location = {"Location": header(r"^/whep/[^/]+/[^/]+/[A-Za-z0-9_-]+$", "DELETE it to end")}
    retry = {"Retry-After": header("^[0-9]+$", "seconds")}
    return {
        "/whep/{flow}/{node}": {
            "post": op(
                "Watch a camera over WebRTC (WHEP): its own H.264, its microphone as Opus",
                LINK_READ,
                {
                    "201": text(SDP_TYPE, "The SDP answer, ICE candidates included.")
                    | {"headers": location},
                    **errors(400, 401, 403, 404, 413),
                    "415": answer(f"The offer is not {SDP_TYPE}.", ERROR),
                    "501": answer(
                        "The webrtc extra (aiortc) is not installed here, or its aiortc"
                        " is not one this server can send with.",
                        ERROR,
                    ),
                    "503": answer(
                        "No frame yet, or the camera has its most viewers (try later).",
                        ERROR,
                        retry,
                    ),
                },
                parameters=[FLOW, node],
                requestBody={
                    "required": True,
                    "description": f"An SDP offer (at most {MAX_OFFER} bytes) that receives"
                    " H.264 video, with its candidates (no trickle).",
                    "content": {SDP_TYPE: {"schema": STR}},
                },
            )
        },
        "/whep/{flow}/{node}/{session}": {
            "delete": op(
                "End a WHEP session",
                LINK_READ,
                {"204": answer("Ended.")} | errors(401, 403, 404),
                parameters=[FLOW, node, session],
            )
        },
    }
