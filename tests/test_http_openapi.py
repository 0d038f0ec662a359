"""The OpenAPI document (``GET /openapi.json``) against a live server.

A real server runs flow ``desk`` in this process (a source that never ends, a
sink that fails some chunks, so dead letters exist) with a token set, next to
a store holding a few artifacts. Schemathesis fuzzes every operation the
document describes (the event stream too, each read cut after a few events or
half a second), with the token and without it, derandomized and bounded:
never a 5xx, and every answer's status, content type, headers and body as
documented. The route table and the document are checked against each other
both ways; ``test_http_openapi_answers.py`` checks answers fuzzing rarely reaches.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR
from schemathesis.transport.serialization import serialize_binary

from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.config import EngineSettings
from mediaflow.flows.spec import NAME_RE
from mediaflow.media import DIGEST_RE
from mediaflow.server import AppState, ServerSettings, bound_port, create_app, start_server
from mediaflow.server.openapi import document
from mediaflow.server.openapi_parts import UPLOAD_TYPES
from tests.engine_nodes import Counter
from tests.http_support import HOST, digest_of, server_thread

TOKEN = "openapi-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SETTINGS = ServerSettings(token=TOKEN)
FLOW = "desk"  # the document's example flow name, so its examples reach a live flow
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
SCHEMA = schemathesis.openapi.from_dict(document(SETTINGS))
# Credentials are this test's choice (the token, or none), never generated ones.
SCHEMA.config.generation.update(with_security_parameters=False)
# Upload bodies are bytes whatever their type (schemathesis serializes only a few types).
schemathesis.serializer.alias(
    [t for t in UPLOAD_TYPES if t not in ("application/octet-stream", "text/plain")],
    "application/octet-stream",
)
# WHIP and WHEP offers are SDP: text.
schemathesis.serializer.alias(["application/sdp"], "text/plain")
# GET /api/events streams until the server stops: schemathesis reads an event stream
# until it has this many events or the request's timeout has passed (EVENTS_TIMEOUT_S).
SCHEMA.config.max_stream_events = 3
EVENTS_TIMEOUT_S = 0.5
ARTIFACTS = {
    "frame": (b"\xff\xd8 not really a jpeg " * 40, "image/jpeg"),
    "clip": (bytes(range(256)) * 20, "video/mp4"),
    "words": (b"hello wall", "text/plain"),
    "page": (b"<script>alert(1)</script>", "text/html"),  # served as octet-stream
}


class Flaky(Node):
    """Fails every seventh chunk on its first delivery; one attempt makes it a dead letter.

    A ``ValueError``, which the engine logs without its traceback: Python 3.11
    draws a traceback's carets with ``ast.parse``, and ``ast.parse`` in two
    threads at once (this server's and Hypothesis reading a filter's lambda in
    the test's) can fail with "SystemError: AST constructor recursion depth
    mismatch" (CPython gh-106905), as one CI run saw."""

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}

    async def run(self, ctx: Context) -> None:
        if ctx.inputs["chunk"]["seq"] % 7 == 3 and not ctx.redelivery:
            raise ValueError("flaky chunk")


class LiveServer:
    """Flow ``desk`` running and served with the token, on its own loop in a thread
    (schemathesis calls are synchronous)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0
        self.digests: dict[str, str] = {}
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as exc:  # reported to the test by start()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        flow = (
            FlowBuilder(FLOW)
            .add("src", Counter, count=10**9, period_s=0.05)
            .add("sink", Flaky, inputs={"chunk": "src.chunk"})
        )
        engine = EngineSettings(retry_base_s=0.01, max_attempts=1, backlog_interval_s=0.1)
        session = FlowSession(flow.build(), self.data_dir, settings=engine)
        await session.start()
        try:
            state = AppState.for_session(session, settings=SETTINGS)
            for name, (data, media_type) in ARTIFACTS.items():
                self.digests[name] = (await state.store.save(data, media_type)).digest
            runner = await start_server(state, HOST, 0)
            try:
                self.port = bound_port(runner)
                self._ready.set()
                await self._stop.wait()
            finally:
                await runner.cleanup()
                await state.close()
        finally:
            await session.stop()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        assert self.port, "the server did not start in time"

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if not self._thread.is_alive():
            self.loop.close()


def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A started :class:`LiveServer`, stopped after the ``yield`` (for module fixtures)."""
    server = LiveServer(tmp_path_factory.mktemp("openapi"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from serving(tmp_path_factory)


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def header(answer: schemathesis.Response, name: str) -> str:
    values: list[str] = answer.headers[name.lower()]
    return values[0]


def validate(
    base_url: str,
    http: requests.Session,
    path: str,
    method: str,
    *,
    token: bool = True,
    **data: Any,
) -> schemathesis.Response:
    """Send one concrete request and check its answer against the document."""
    case = SCHEMA[path][method].Case(**data)
    headers = AUTH if token else {}
    response = case.call(base_url=base_url, session=http, headers=headers, timeout=10)
    case.validate_response(response, checks=CHECKS, headers=headers)
    return response


# -- the document and the routes ---------------------------------------------------


async def test_the_document_describes_exactly_the_routes(tmp_path: Path) -> None:
    state = AppState(tmp_path, settings=SETTINGS)
    try:
        app = create_app(state)
        registered = {
            (route.method, route.resource.canonical)
            for route in app.router.routes()
            if route.resource is not None
        }
    finally:
        await state.close()
    paths = document(SETTINGS)["paths"]
    documented = {(method.upper(), path) for path, item in paths.items() for method in item}
    # aiohttp adds HEAD to every GET route; the document lists HEAD where clients rely on
    # it (artifacts) and says in its description that every GET answers HEAD.
    implicit = {("HEAD", path) for method, path in registered if method == "GET"}
    assert documented - implicit == registered - implicit
    assert ("HEAD", "/artifacts/{digest}") in documented


def test_the_document_is_openapi_31_with_the_codes_patterns() -> None:
    doc = json.loads(json.dumps(document(SETTINGS)))  # as served
    assert list(OPENAPI_31_VALIDATOR.iter_errors(doc)) == []
    parameters = doc["paths"]["/api/flows/{flow}/pause"]["post"]["parameters"]
    assert parameters[0]["schema"]["pattern"] == NAME_RE.pattern
    parameters = doc["paths"]["/artifacts/{digest}"]["get"]["parameters"]
    assert parameters[0]["schema"]["pattern"] == f"^{DIGEST_RE.pattern}$"
    body = doc["paths"]["/api/flows/{flow}/links"]["post"]["requestBody"]["content"]
    lifetime = body["application/json"]["schema"]["properties"]["expires_in_s"]
    assert lifetime["maximum"] == SETTINGS.link_max_s


def test_locked_reads_and_wall_links_as_documented(
    tmp_path: Path, live: LiveServer, http: requests.Session
) -> None:
    # The live server shares the token, so its links are genuine here too.
    made = validate(
        live.url, http, "/api/flows/{flow}/links", "POST", path_parameters={"flow": FLOW}
    )
    link = {"Authorization": f"Link {made.json()['link']}"}
    locked = ServerSettings(token=TOKEN, lock_reads=True, link_max_s=3600, link_default_s=60)
    with server_thread(tmp_path, locked) as thread:
        url = f"http://{HOST}:{thread.port}"
        # The document follows the read lock, like every read but /healthz.
        assert validate(url, http, "/openapi.json", "GET", token=False).status_code == 401
        served = validate(url, http, "/openapi.json", "GET")
        assert served.json() == json.loads(json.dumps(document(locked)))
        assert validate(url, http, "/healthz", "GET", token=False).status_code == 200
        bad = {"Authorization": "Link nonsense"}
        refused = validate(url, http, "/api/flows", "GET", token=False, headers=bad)
        assert refused.status_code == 401 and refused.json()["reason"] == "malformed"
        listed = validate(url, http, "/api/flows", "GET", token=False, headers=link)
        assert listed.status_code == 200  # the link's flow alone (unknown to this server)
        outside = validate(url, http, "/openapi.json", "GET", token=False, headers=link)
        assert outside.status_code == 403 and outside.json()["flow"] == FLOW
        write = validate(
            url,
            http,
            "/api/flows/{flow}/pause",
            "POST",
            token=False,
            headers=link,
            path_parameters={"flow": FLOW},
        )
        assert write.status_code == 403


# -- fuzzing -------------------------------------------------------------------------


TURNS = itertools.count()


def steer(case: schemathesis.Case[Any], live: LiveServer, http: requests.Session) -> None:
    """Point every other well-formed digest or dead letter id a case makes up at one that
    exists, so fuzzing reaches the 2xx answers too. Generation is derandomized and the
    turns are counted, so every run sends the same requests."""
    params = case.path_parameters
    digest = unquote(str(params.get("digest", "")))  # path parameters come quoted
    turn = next(TURNS)
    if DIGEST_RE.fullmatch(digest) and turn % 2:
        if case.method != "PUT":
            names = sorted(live.digests)
            params["digest"] = live.digests[names[turn // 2 % len(names)]]
        elif case.media_type != "text/plain":  # bytes go as generated; text is re-encoded
            params["digest"] = digest_of(serialize_binary(case.body))
    if params.get("flow") == FLOW and "id" in params and turn % 2:
        listed = http.get(f"{live.url}/api/flows/{FLOW}/dead-letters?limit=1", timeout=10)
        for letter in listed.json()["dead_letters"]:
            params["id"] = letter["id"]


@pytest.mark.parametrize("credential", ["token", "none"])
@SCHEMA.parametrize()
@settings(
    max_examples=20,
    derandomize=True,  # the same requests every run
    deadline=None,
    database=None,  # no example files left in the work tree
    suppress_health_check=list(HealthCheck),
)
def test_fuzz(
    case: schemathesis.Case[Any], live: LiveServer, http: requests.Session, credential: str
) -> None:
    headers = AUTH if credential == "token" else {}
    steer(case, live, http)
    timeout = EVENTS_TIMEOUT_S if case.operation.path == "/api/events" else 35
    response = case.call(base_url=live.url, session=http, headers=headers, timeout=timeout)
    case.validate_response(response, checks=CHECKS, headers=headers)
    method = case.operation.method.upper()
    # A write: an operation no anonymous client may call (a WHEP offer is a POST that reads).
    security = SCHEMA.raw_schema["paths"][case.operation.path][method.lower()]["security"]
    anonymous = not security or {} in security
    if credential == "none" and not anonymous and case.method.upper() == method:
        assert response.status_code == 401, (case.method, case.formatted_path)
