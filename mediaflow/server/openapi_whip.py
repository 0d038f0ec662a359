"""The WHIP routes in :mod:`.openapi`'s document (see :mod:`.whip`). Pure data."""

from __future__ import annotations

from mediaflow.flows.spec import NAME_PATTERN
from mediaflow.server.openapi_parts import (
    ERROR,
    STR,
    Schema,
    answer,
    errors,
    header,
    obj,
    op,
    param,
    string,
)
from mediaflow.server.openapi_parts import FLOW as FLOW_PARAM
from mediaflow.server.whip import MAX_OFFER, SDP

# Who may publish: the token, or a wall link for this flow (header or cookie).
PUBLISH: list[Schema] = [{}, {"bearer": []}, {"link": []}, {"linkCookie": []}]


def whip_ops() -> Schema:
    node = param("path", "node", string(f"^{NAME_PATTERN}$"), "a webrtc node", example="phone")
    session = param("path", "session", string("^[A-Za-z0-9_-]{1,64}$"), "the Location's last part")
    offer = {"type": "string", "maxLength": MAX_OFFER, "pattern": "^v=0"}
    sdp_answer = {
        "description": "The SDP answer (ICE candidates in it, no trickle).",
        "content": {SDP: {"schema": STR}},
        "headers": {
            "Location": header("^/whip/", "the session: DELETE it to hang up"),
        },
    }
    busy = answer(
        "The node has all the publishers it takes (its `publishers` option), or WebRTC is"
        " not installed here.",
        ERROR,
        {"Retry-After": {"schema": {"type": "string"}, "description": "seconds"}},
    )
    return {
        "/whip/{flow}/{node}": {
            "post": op(
                "Publish a camera and microphone into a webrtc node (WHIP)",
                PUBLISH,
                {"201": sdp_answer}
                | errors(400, 401, 403, 404, 413)
                | {"415": answer("The body is not application/sdp.", ERROR), "503": busy},
                parameters=[FLOW_PARAM, node],
                requestBody={
                    "required": True,
                    "description": "The publisher's SDP offer.",
                    "content": {SDP: {"schema": offer}},
                },
            )
        },
        "/whip/{flow}/{node}/{session}": {
            "delete": op(
                "Hang up a WHIP publisher",
                PUBLISH,
                {"200": answer("Ended.", obj({"ended": STR}))} | errors(401, 403, 404),
                parameters=[FLOW_PARAM, node, session],
            )
        },
    }
