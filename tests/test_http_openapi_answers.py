"""Concrete answers checked against the OpenAPI document: ranges and preconditions on
every kind of artifact, uploads, a step of a paused flow, a requeue and a discard,
links, the event stream read with a bound, and HEAD on every GET route, on the live
server of ``test_http_openapi.py`` (its own instance here)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis

from mediaflow.server.openapi import document
from tests.http_support import HOST, digest_of
from tests.test_http_openapi import (
    ARTIFACTS,
    FLOW,
    SETTINGS,
    LiveServer,
    header,
    serving,
    validate,
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from serving(tmp_path_factory)


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def test_artifact_answers_as_documented(live: LiveServer, http: requests.Session) -> None:
    path = "/artifacts/{digest}"
    for name, (data, media_type) in ARTIFACTS.items():
        digest = {"digest": live.digests[name]}
        etag = f'"{live.digests[name]}"'
        whole = validate(live.url, http, path, "GET", path_parameters=digest)
        assert whole.status_code == 200 and whole.content == data, name
        served = "application/octet-stream" if media_type == "text/html" else media_type
        assert header(whole, "Content-Type").startswith(served)
        head = validate(live.url, http, path, "HEAD", path_parameters=digest)
        assert head.status_code == 200 and header(head, "ETag") == etag
        for headers, status in [
            ({"Range": "bytes=2-5"}, 206),
            ({"Range": "bytes=-3"}, 206),
            ({"Range": "bytes=0-1,4-5"}, 200),  # several ranges: the whole body
            ({"Range": f"bytes={len(data)}-"}, 416),
            ({"Range": "bytes=0-3", "If-Range": etag}, 206),
            ({"Range": "bytes=0-3", "If-Range": '"other"'}, 200),
            ({"If-None-Match": etag}, 304),
            ({"If-Match": '"other"'}, 412),
            ({"If-Unmodified-Since": "Thu, 01 Jan 1970 00:00:00 GMT"}, 412),
        ]:
            answer = validate(live.url, http, path, "GET", path_parameters=digest, headers=headers)
            assert answer.status_code == status, (name, headers)
            # RFC 9110 14.2: a HEAD ignores Range; preconditions hold as for GET.
            answer = validate(live.url, http, path, "HEAD", path_parameters=digest, headers=headers)
            assert answer.status_code == (200 if status in (206, 416) else status), (name, headers)
        retyped = validate(
            live.url, http, path, "GET", path_parameters=digest, query={"type": "video/webm"}
        )
        assert header(retyped, "Content-Type") == "video/webm"
    refusals = [
        ({"digest": live.digests["frame"]}, {"type": "text/html"}, 400),
        ({"digest": "sha256:" + "0" * 64}, {}, 404),
        ({"digest": "sha256:" + "A" * 64}, {}, 400),
    ]
    for params, query, status in refusals:
        answer = validate(live.url, http, path, "GET", path_parameters=params, query=query)
        assert answer.status_code == status


def test_uploads_answer_as_documented(live: LiveServer, http: requests.Session) -> None:
    body = b"uploaded by the openapi test"
    digest = digest_of(body)
    stored = validate(
        live.url,
        http,
        "/artifacts/{digest}",
        "PUT",
        path_parameters={"digest": digest},
        body=body,
        media_type="audio/wav",
        headers={"X-Mediaflow-Meta": '{"take": 2}'},
    )
    assert stored.status_code == 201 and stored.json()["meta"] == {"take": 2}
    assert header(stored, "Location") == f"/artifacts/{digest}"
    for path, params, media_type, headers, status in [
        ("/artifacts/{digest}", {"digest": digest_of(b"other")}, "image/png", {}, 400),
        ("/artifacts", {}, "image/png", {"X-Mediaflow-Meta": "[1]"}, 400),
        ("/artifacts", {}, "text/html", {}, 415),
    ]:
        answer = validate(
            live.url,
            http,
            path,
            "PUT",
            path_parameters=params,
            body=body,
            media_type=media_type,
            headers=headers,
        )
        assert answer.status_code == status, (path, media_type, headers)
    refused = validate(
        live.url, http, "/artifacts", "PUT", token=False, body=body, media_type="image/png"
    )
    assert refused.status_code == 401 and header(refused, "WWW-Authenticate").startswith("Bearer")


def _control(
    live: LiveServer, http: requests.Session, action: str, **query: str
) -> schemathesis.Response:
    return validate(
        live.url,
        http,
        f"/api/flows/{{flow}}/{action}",
        "POST",
        path_parameters={"flow": FLOW},
        query=query,
    )


def test_flow_control_answers_as_documented(live: LiveServer, http: requests.Session) -> None:
    for action in ("enable", "resume"):  # from whatever state earlier tests left
        assert _control(live, http, action).status_code == 200
    assert _control(live, http, "step").status_code == 409  # running
    paused = _control(live, http, "pause").json()
    assert (paused["status"], paused["changed"]) == ("paused", True)
    stepped = _control(live, http, "step", wait_s="5").json()["stepped"]
    assert stepped is not None and stepped["flow"] == FLOW
    assert _control(live, http, "disable").json()["status"] == "disabled"
    assert _control(live, http, "pause").status_code == 409
    assert _control(live, http, "enable").json()["status"] == "running"
    view = validate(live.url, http, "/api/flows/{flow}", "GET", path_parameters={"flow": FLOW})
    assert view.json()["live"] is True and view.json()["status"] == "running"
    listing = validate(live.url, http, "/api/flows", "GET").json()
    assert [flow["name"] for flow in listing["flows"]] == [FLOW]


def test_dead_letters_answer_as_documented(live: LiveServer, http: requests.Session) -> None:
    flow = {"flow": FLOW}
    letters: list[dict[str, Any]] = []
    for _ in range(100):  # the sink fails every seventh chunk: a few appear within seconds
        listed = validate(
            live.url, http, "/api/flows/{flow}/dead-letters", "GET", path_parameters=flow
        )
        letters = listed.json()["dead_letters"]
        if len(letters) >= 2:
            break
        time.sleep(0.1)
    assert len(letters) >= 2
    first, second = letters[0]["id"], letters[1]["id"]
    requeue = "/api/flows/{flow}/dead-letters/{id}/requeue"
    requeued = validate(live.url, http, requeue, "POST", path_parameters={**flow, "id": first})
    assert requeued.status_code == 200 and requeued.json()["id"] == first
    discard = "/api/flows/{flow}/dead-letters/{id}"
    for status in (204, 404):
        answer = validate(live.url, http, discard, "DELETE", path_parameters={**flow, "id": second})
        assert answer.status_code == status
    limited = validate(
        live.url,
        http,
        "/api/flows/{flow}/dead-letters",
        "GET",
        path_parameters=flow,
        query={"limit": 0},
    )
    assert limited.status_code == 400


def test_links_answer_as_documented(live: LiveServer, http: requests.Session) -> None:
    path = "/api/flows/{flow}/links"
    made = validate(
        live.url, http, path, "POST", path_parameters={"flow": FLOW}, body={"expires_in_s": 60}
    )
    assert made.status_code == 201 and made.json()["flow"] == FLOW
    for flow, body, status in [
        (FLOW, {"expires_in_s": 0}, 400),
        (FLOW, {"expires_in_s": 60, "scope": "all"}, 400),
        ("nowhere", {}, 404),
    ]:
        answer = validate(live.url, http, path, "POST", path_parameters={"flow": flow}, body=body)
        assert answer.status_code == status, body
    too_big = validate(
        live.url,
        http,
        path,
        "POST",
        path_parameters={"flow": FLOW},
        body={"expires_in_s": 60, "pad": "x" * 5000},
    )
    assert too_big.status_code == 413


def test_event_stream_as_documented(live: LiveServer, http: requests.Session) -> None:
    # Fuzzing reads a few events of whatever comes; here, a filter keeps what it names.
    documented = document(SETTINGS)["paths"]["/api/events"]["get"]["responses"]["200"]
    with http.get(
        live.url + "/api/events", params={"types": "latest"}, stream=True, timeout=10
    ) as answer:
        assert answer.status_code == 200
        assert answer.headers["Content-Type"].split(";")[0] in documented["content"]
        lines = answer.iter_lines()
        assert next(lines) == b"retry: 2000"
        block = [next(lines) for _ in range(4)]  # "", id, event, data
        assert block[2] == b"event: latest", block
        assert json.loads(block[3].removeprefix(b"data: "))["flow"] == FLOW
    for query, headers in [({"types": "no spaces!"}, {}), ({}, {"Last-Event-ID": "x"})]:
        refused = validate(live.url, http, "/api/events", "GET", query=query, headers=headers)
        assert refused.status_code == 400


def test_head_answers_every_get_route_with_headers_only(
    live: LiveServer, http: requests.Session
) -> None:
    """aiohttp adds HEAD to every GET route: each answers with the GET's status and no
    body, so the connection stays usable (HEAD /api/events once streamed events)."""
    real = {"{flow}": FLOW, "{digest}": live.digests["clip"], "{name}": "wall.js"}
    paths = []
    for path, item in document(SETTINGS)["paths"].items():
        if "get" in item:
            for template, value in real.items():
                path = path.replace(template, value)
            paths.append(path)
    expected = []
    for path in paths:
        with http.get(live.url + path, stream=True, timeout=10) as answer:
            expected.append(str(answer.status_code).encode())
    with socket.create_connection((HOST, live.port), timeout=10) as sock:
        for path in paths:  # pipelined on one connection
            sock.sendall(f"HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    answers = received.split(b"\r\n\r\n")
    heads, last = answers[: len(paths)], answers[len(paths) :]
    assert [answer.split(b" ", 2)[1] for answer in heads] == expected, heads
    assert last[0].startswith(b"HTTP/1.1 200")
    assert json.loads(last[1]) == {"ok": True, "queue": "ok"}
