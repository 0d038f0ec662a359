"""Operating flows over HTTP, against a real server next to real flows, on both queue
backends: pause holds everything and step runs exactly the oldest item and says
which; disable ends the source and enable resumes it with nothing lost; a dead
letter is listed, requeued (it runs again as a redelivery) and discarded; without
the token every change is 401; a flow this process does not run is 404 or 409."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.events import EventBus
from mediaflow.server import AppState, ServerSettings
from mediaflow.server.control import decide
from tests.engine_nodes import Counter, Recorder, source_ended
from tests.http_support import Served, serve
from tests.redis_server import RedisServer

TOKEN = "control-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)


class Picky(Node):
    """Fails the chunks whose seq is in ``bad`` on their first delivery only; records
    every run as ``(seq, deliveries, redelivery)``."""

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}
    runs: ClassVar[list[tuple[int, int, bool]]] = []

    def __init__(self, bad: list[int] | None = None) -> None:
        self.bad = set(bad or [])
        Picky.runs = []

    async def run(self, ctx: Context) -> None:
        assert ctx.item is not None
        seq = ctx.inputs["chunk"]["seq"]
        Picky.runs.append((seq, ctx.item.deliveries, ctx.redelivery))
        if seq in self.bad and ctx.item.deliveries == 1:
            raise RuntimeError(f"picky about chunk {seq}")


@pytest.fixture(params=["sqlite", "redis"])
def queue_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    server: RedisServer = request.getfixturevalue("redis_server")
    return f"{server.url}?prefix=httpctl-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def paced(tmp_path: Path, queue_url: str | None) -> AsyncIterator[Served]:
    """A server with the token next to flow ``ops``: 300 chunks, one every 5 ms, to
    a recorder."""
    flow = (
        FlowBuilder("ops")
        .add("src", Counter, count=300, period_s=0.005)
        .add("sink", Recorder, inputs={"chunk": "src.chunk"})
    )
    session = FlowSession(
        flow.build(), tmp_path, queue_url=queue_url, settings=FAST, bus=EventBus(history=10_000)
    )
    await session.start()
    try:
        state = AppState.for_session(session, settings=ServerSettings(token=TOKEN))
        async with serve(tmp_path, state=state) as served:
            yield served
    finally:
        await session.stop()


def session_of(served: Served) -> FlowSession:
    return served.state.sessions["ops"]


async def call(served: Served, method: str, path: str, *, token: bool = True) -> tuple[int, Any]:
    headers = AUTH if token else {}
    async with served.client.request(method, served.url + path, headers=headers) as response:
        body = await response.json() if response.status != 204 else None
        return response.status, body


async def eventually(check: Callable[[], Any], timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


@pytest.mark.parametrize(
    ("action", "status", "apply", "refused"),
    [
        ("pause", "running", True, None),
        ("pause", "paused", False, None),
        ("resume", "paused", True, None),
        ("resume", "running", False, None),
        ("step", "paused", True, None),
        ("step", "running", False, "is not paused: pause it before stepping"),
        ("pause", "disabled", False, "is disabled: enable it first"),
        ("step", "disabled", False, "is disabled: enable it first"),
        ("disable", "paused", True, None),
        ("disable", "disabled", False, None),
        ("enable", "disabled", True, None),
        ("enable", "paused", False, None),
        ("enable", "stopping", False, "is stopping"),
    ],
)
def test_decisions(action: Any, status: str, apply: bool, refused: str | None) -> None:
    decision = decide(action, status)
    assert (decision.apply, decision.refused) == (apply, refused)


async def test_pause_holds_everything_and_step_runs_the_oldest_item(paced: Served) -> None:
    served, session = paced, session_of(paced)
    status, body = await call(served, "POST", "/api/flows/ops/step")
    assert status == 409 and "not paused" in body["error"]
    assert (await call(served, "POST", "/api/flows/ops/pause", token=False))[0] == 401
    status, body = await call(served, "POST", "/api/flows/ops/pause")
    assert status == 200
    assert body["flow"] == "ops" and body["status"] == "paused" and body["changed"] is True
    assert (body["paused"], body["disabled"], body["stopping"]) == (True, False, False)
    status, again = await call(served, "POST", "/api/flows/ops/pause")
    assert status == 200 and again["changed"] is False and again["status"] == "paused"

    async def backlog_of_ten() -> bool:
        return (await session.queue.backlog_flows()).get("ops", 0) >= 10

    await eventually(backlog_of_ten)
    ran = len(Recorder.seen["sink"])
    await asyncio.sleep(0.2)
    assert len(Recorder.seen["sink"]) == ran  # paused: nothing runs
    view = (await call(served, "GET", "/api/flows/ops", token=False))[1]
    assert (view["status"], view["paused"], view["disabled"]) == ("paused", True, False)
    listing = (await call(served, "GET", "/api/flows", token=False))[1]
    assert listing["flows"][0]["status"] == "paused"

    for n in range(1, 4):
        status, body = await call(served, "POST", "/api/flows/ops/step")
        assert status == 200 and body["status"] == "paused"
        stepped = body["stepped"]
        assert (stepped["node"], stepped["seq"], stepped["deliveries"]) == ("sink", ran + n, 1)
        assert {"entry_id", "enqueued_at"} <= set(stepped)
        await eventually(lambda: len(Recorder.seen["sink"]) == ran + n)  # noqa: B023 - awaited here
    await asyncio.sleep(0.2)
    assert Recorder.seen["sink"] == list(range(ran + 3))  # exactly three more, oldest first

    status, body = await call(served, "POST", "/api/flows/ops/resume")
    assert status == 200 and body["status"] == "running" and body["changed"] is True
    assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
    assert Recorder.seen["sink"] == list(range(300))
    status, body = await call(served, "POST", "/api/flows/ops/step?wait_s=0.2")
    assert status == 409


async def test_step_with_nothing_waiting_answers_null(paced: Served) -> None:
    served, session = paced, session_of(paced)
    assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
    assert (await call(served, "POST", "/api/flows/ops/pause"))[0] == 200
    status, body = await call(served, "POST", "/api/flows/ops/step?wait_s=0.3")
    assert status == 200 and body["stepped"] is None and body["status"] == "paused"
    for bad in ("0", "x", "31"):
        status, body = await call(served, "POST", f"/api/flows/ops/step?wait_s={bad}")
        assert status == 400 and "wait_s" in body["error"]


async def test_disable_ends_the_source_and_enable_resumes_it_losing_nothing(
    paced: Served,
) -> None:
    served, session = paced, session_of(paced)
    await eventually(lambda: len(Recorder.seen["sink"]) >= 20)
    assert (await call(served, "POST", "/api/flows/ops/disable", token=False))[0] == 401
    status, body = await call(served, "POST", "/api/flows/ops/disable")
    assert status == 200 and body["status"] == "disabled" and body["disabled"] is True
    for action in ("pause", "resume", "step"):
        status, refused = await call(served, "POST", f"/api/flows/ops/{action}")
        assert status == 409 and "disabled: enable it first" in refused["error"], action
    # The source notices ctx.stopping(), hands its item back and ends.
    await eventually(lambda: source_ended(session.bus, "src"))
    emitted = session.snapshot().latest[("src", "chunk")]["seq"]
    ran = len(Recorder.seen["sink"])
    await asyncio.sleep(0.3)
    assert session.snapshot().latest[("src", "chunk")]["seq"] == emitted  # the source ended
    assert len(Recorder.seen["sink"]) == ran  # and nothing runs
    assert emitted < 299
    view = (await call(served, "GET", "/api/flows/ops"))[1]
    assert view["status"] == "disabled"
    status, body = await call(served, "POST", "/api/flows/ops/enable")
    assert status == 200 and body["status"] == "running" and body["changed"] is True
    status, body = await call(served, "POST", "/api/flows/ops/enable")
    assert status == 200 and body["changed"] is False
    assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
    assert Recorder.seen["sink"] == list(range(300))  # resumed after its last chunk


@pytest.fixture
async def picky(tmp_path: Path, queue_url: str | None) -> AsyncIterator[Served]:
    """Flow ``ops``: six chunks to a node that fails chunks 2 and 4 once; one
    attempt per item, so each becomes a dead letter."""
    flow = (
        FlowBuilder("ops")
        .add("src", Counter, count=6)
        .add("sink", Picky, bad=[2, 4], inputs={"chunk": "src.chunk"})
    )
    settings = EngineSettings(retry_base_s=0.01, max_attempts=1, backlog_interval_s=0.1)
    session = FlowSession(flow.build(), tmp_path, queue_url=queue_url, settings=settings)
    await session.start()
    try:
        state = AppState.for_session(session, settings=ServerSettings(token=TOKEN))
        async with serve(tmp_path, state=state) as served:
            yield served
    finally:
        await session.stop()


async def test_dead_letters_are_listed_requeued_and_discarded(picky: Served) -> None:
    served, session = picky, session_of(picky)
    assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
    status, body = await call(served, "GET", "/api/flows/ops/dead-letters", token=False)
    assert status == 200 and body["flow"] == "ops"
    letters = body["dead_letters"]
    assert len(letters) == 2
    newest, oldest = letters  # newest first
    assert '"seq":4' in newest["payload_preview"] and '"seq":2' in oldest["payload_preview"]
    assert oldest["node"] == "sink" and oldest["deliveries"] == 1
    assert "picky about chunk 2" in oldest["reason"]
    assert oldest["dead_at_iso"].endswith("Z") and oldest["dead_at"] <= newest["dead_at"]
    assert oldest["payload_truncated"] is False and oldest["id"] != newest["id"]
    assert {"seq", "entry_id", "kind"} <= set(oldest)
    one = await call(served, "GET", "/api/flows/ops/dead-letters?limit=1")
    assert [d["id"] for d in one[1]["dead_letters"]] == [newest["id"]]

    requeue = f"/api/flows/ops/dead-letters/{oldest['id']}/requeue"
    assert (await call(served, "POST", requeue, token=False))[0] == 401
    events = served.state.bus.subscribe(types=frozenset({"dead_letter_requeued"}))
    status, body = await call(served, "POST", requeue)
    assert status == 200 and body["id"] == oldest["id"]
    assert body["requeued"]["node"] == "sink" and body["requeued"]["deliveries"] == 1
    event = await events.get(timeout=5)
    assert event is not None and event.data["id"] == oldest["id"] and event.data["flow"] == "ops"
    # It runs again, marked as a redelivery, and succeeds this time.
    await eventually(lambda: (2, 2, True) in Picky.runs)
    assert (await call(served, "POST", requeue))[0] == 404  # gone from the list
    left = (await call(served, "GET", "/api/flows/ops/dead-letters"))[1]["dead_letters"]
    assert [d["id"] for d in left] == [newest["id"]]

    discard = f"/api/flows/ops/dead-letters/{newest['id']}"
    assert (await call(served, "DELETE", discard, token=False))[0] == 401
    deleted = served.state.bus.subscribe(types=frozenset({"dead_letter_deleted"}))
    assert await call(served, "DELETE", discard) == (204, None)
    event = await deleted.get(timeout=5)
    assert event is not None and event.data["id"] == newest["id"] and event.data["node"] == "sink"
    assert (await call(served, "DELETE", discard))[0] == 404
    left = (await call(served, "GET", "/api/flows/ops/dead-letters"))[1]["dead_letters"]
    assert left == []
    assert [run for run in Picky.runs if run[0] == 4] == [(4, 1, False)]  # discarded: not run


async def test_refusals(picky: Served) -> None:
    served = picky
    status, body = await call(served, "POST", "/api/flows/nope/pause")
    assert status == 404 and body == {"error": "no flow 'nope'"}
    assert (await call(served, "POST", "/api/flows/bad%20name/pause"))[0] == 400
    assert (await call(served, "GET", "/api/flows/nope/dead-letters"))[0] == 404
    assert (await call(served, "GET", "/api/flows/ops/dead-letters?limit=0"))[0] == 400
    assert (await call(served, "GET", "/api/flows/ops/dead-letters?limit=x"))[0] == 400
    assert (await call(served, "POST", "/api/flows/ops/dead-letters/9-9/requeue"))[0] == 404
    assert (await call(served, "DELETE", "/api/flows/ops/dead-letters/" + "1" * 300))[0] == 404
    assert (await call(served, "POST", "/api/flows/ops/pause", token=False))[0] == 401


async def test_serve_without_the_flow_answers_409_but_operates_dead_letters(
    tmp_path: Path,
) -> None:
    flow = (
        FlowBuilder("ops")
        .add("src", Counter, count=4)
        .add("sink", Picky, bad=[1], inputs={"chunk": "src.chunk"})
    )
    settings = EngineSettings(retry_base_s=0.01, max_attempts=1)
    async with FlowSession(flow.build(), tmp_path, settings=settings) as session:
        assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
    state = AppState.for_serve(tmp_path, settings=ServerSettings(token=TOKEN))
    async with serve(tmp_path, state=state) as served:
        for action in ("pause", "resume", "step", "disable", "enable"):
            status, body = await call(served, "POST", f"/api/flows/ops/{action}")
            assert status == 409 and "not running in this process" in body["error"], action
        assert (await call(served, "POST", "/api/flows/other/pause"))[0] == 404
        view = (await call(served, "GET", "/api/flows/ops"))[1]
        assert view["live"] is False and view["status"] is None
        (dead,) = (await call(served, "GET", "/api/flows/ops/dead-letters"))[1]["dead_letters"]
        status, body = await call(
            served, "POST", f"/api/flows/ops/dead-letters/{dead['id']}/requeue"
        )
        assert status == 200 and body["requeued"]["deliveries"] == 1
        assert served.state.queue is not None
        assert (await served.state.queue.backlog_flows()).get("ops") == 1  # back, ready


async def test_the_session_endpoint_says_what_a_request_may_do(tmp_path: Path) -> None:
    async with serve(tmp_path, settings=ServerSettings(token=TOKEN)) as served:
        assert await call(served, "GET", "/api/session", token=False) == (
            200,
            {"token_required": True, "read": True, "write": False},
        )
        assert (await call(served, "GET", "/api/session"))[1]["write"] is True
    async with serve(tmp_path, settings=ServerSettings()) as served:
        assert (await call(served, "GET", "/api/session", token=False))[1] == {
            "token_required": False,
            "read": True,
            "write": True,
        }
