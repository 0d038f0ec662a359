"""``use = "webhook"`` against a real aiohttp receiver on loopback: every item arrives
in order and signed through a receiver's failures, dead letters after
``max_deliveries`` and their requeue, refusals, timeouts, bad options, and secrets
kept out of logs and events."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from mediaflow import FlowBuilder, FlowError, FlowSession
from mediaflow.engine.events import Event, EventBus
from mediaflow.nodes.webhook_payload import SIGNATURE_HEADER, verify
from mediaflow.server import AppState, ServerSettings
from tests.connector_helpers import FAST
from tests.http_support import serve
from tests.webhook_support import SECRET, Numbers, receiving

TOKEN = "webhook-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
QUICK = {"retry_base_s": 0.05, "retry_max_s": 0.2}  # the sink's own backoff, made short


@pytest.fixture(autouse=True)
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAFLOW_WEBHOOK_SECRET", SECRET)
    for name in ("MEDIAFLOW_TOKEN", "MEDIAFLOW_LOCK_READS"):
        monkeypatch.delenv(name, raising=False)


def flow(url: str, count: int, **options: Any) -> FlowBuilder:
    return (
        FlowBuilder("hooks")
        .add("src", Numbers, count=count)
        .add("hook", "webhook", inputs={"event": "src.event"}, url=url, **{**QUICK, **options})
    )


@asynccontextmanager
async def running(builder: FlowBuilder, data: Path) -> AsyncIterator[FlowSession]:
    session = FlowSession(builder.build(), data, settings=FAST, bus=EventBus(history=10_000))
    await session.start()
    try:
        yield session
    finally:
        await session.stop()


def of_type(session: FlowSession, event_type: str) -> list[Event]:
    return [e for e in session.bus.recent(0) if e.type == event_type]


async def test_a_receiver_failing_for_a_while_gets_every_item_in_order_signed(
    tmp_path: Path,
) -> None:
    """500 for the first 8 requests, then 200: 10 items, all arrive, in order."""
    async with (
        receiving(lambda n: 500 if n < 8 else 200) as receiver,
        running(flow(receiver.url, 10), tmp_path) as session,
    ):
        await receiver.wait_for(lambda: len(receiver.delivered()) == 10)
        assert await session.wait(until_idle=True) == "idle"
        retries = of_type(session, "cascade_retry")
        dropped = of_type(session, "cascade_dropped")
    bodies = receiver.delivered()
    assert [b["value"] for b in bodies] == [{"n": n} for n in range(10)]
    # Ordered: no request for a later item before the earlier one was taken.
    asked = [r.json["value"]["n"] for r in receiver.requests]
    assert asked == sorted(asked) and asked[:8] == [0] * 8
    now = time.time()
    for request in receiver.requests:
        assert request.headers["Content-Type"] == "application/json"
        header = request.headers[SIGNATURE_HEADER]
        assert verify(SECRET.encode(), request.body, header, now)
        assert not verify(b"another secret", request.body, header, now)
        assert not verify(SECRET.encode(), request.body + b" ", header, now)
    first = bodies[0]
    assert first["flow"] == "hooks" and first["node"] == "hook" and first["port"] == "event"
    assert first["from"] == {"node": "src", "port": "event"} and first["kind"] == "json"
    assert first["redelivery"] is False and first["seq"] >= 0
    assert first["id"] == receiver.requests[0].json["id"]  # one id on every retry
    assert [e.data["attempt"] for e in retries] == list(range(1, 9))
    assert all(
        e.data["error"] == f"WebhookFailed: POST {receiver.url} answered 500" for e in retries
    )
    assert dropped == []


async def test_after_max_deliveries_a_dead_letter_that_requeued_arrives(tmp_path: Path) -> None:
    status = {"now": 503}
    async with receiving(lambda n: status["now"]) as receiver:
        builder = flow(receiver.url, 2, max_deliveries=3)
        async with running(builder, tmp_path) as session:
            state = AppState.for_session(session, settings=ServerSettings(token=TOKEN))
            async with serve(tmp_path, state=state) as served:
                dead_letters = f"{served.url}/api/flows/hooks/dead-letters"

                async def letters() -> list[dict[str, Any]]:
                    async with served.client.get(dead_letters, headers=AUTH) as answer:
                        found: list[dict[str, Any]] = (await answer.json())["dead_letters"]
                        return found

                await receiver.wait_for(lambda: len(receiver.requests) == 6)
                async with asyncio.timeout(10):
                    while len(found := await letters()) < 2:
                        await asyncio.sleep(0.05)
                # Item 0 failed 3 times and died, then item 1 did.
                assert [r.json["value"]["n"] for r in receiver.requests] == [0, 0, 0, 1, 1, 1]
                dead = next(d for d in found if json.loads(d["payload_preview"])["value"]["n"] == 0)
                assert dead["node"] == "hook" and "answered 503" in dead["reason"]
                status["now"] = 200
                requeue = f"{dead_letters}/{dead['id']}/requeue"
                async with served.client.post(requeue, headers=AUTH) as answer:
                    assert answer.status == 200, await answer.text()
                await receiver.wait_for(lambda: len(receiver.delivered()) == 1)
            dropped = of_type(session, "cascade_dropped")
    assert [e.data["attempts"] for e in dropped] == [3, 3]
    assert "answered 503" in dropped[0].data["reason"]
    (arrived,) = receiver.delivered()
    assert arrived["value"] == {"n": 0} and arrived["redelivery"] is True


async def test_a_4xx_is_dead_lettered_at_once_and_the_next_item_goes(tmp_path: Path) -> None:
    async with (
        receiving(lambda n: 422 if n == 0 else 200) as receiver,
        running(flow(receiver.url, 3), tmp_path) as session,
    ):
        await receiver.wait_for(lambda: len(receiver.delivered()) == 2)
        dropped = of_type(session, "cascade_dropped")
        retries = of_type(session, "cascade_retry")
    assert [r.json["value"]["n"] for r in receiver.requests] == [0, 1, 2]
    assert [e.data["seq"] for e in dropped] == [receiver.requests[0].json["seq"]]
    assert "answered 422, which no retry mends" in dropped[0].data["reason"]
    assert retries == []


async def test_a_receiver_that_never_answers_times_out_and_is_retried(tmp_path: Path) -> None:
    async with receiving(lambda n: None if n == 0 else 200) as receiver:
        started = time.monotonic()
        async with running(flow(receiver.url, 1, timeout_s=0.3), tmp_path) as session:
            await receiver.wait_for(lambda: len(receiver.delivered()) == 1)
            took = time.monotonic() - started
            (retry,) = of_type(session, "cascade_retry")
    assert "no answer within timeout_s=0.3" in retry.data["error"]
    assert 0.3 <= took < 5


async def test_secrets_stay_out_of_logs_events_and_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the receiver's own access log aside, below
    async with receiving(lambda n: 500 if n < 2 else 200) as receiver:
        secret_url = receiver.url.replace("http://", "http://alice:pa55word@") + "?key=qkey42"
        async with running(flow(secret_url, 1), tmp_path) as session:
            await receiver.wait_for(lambda: len(receiver.delivered()) == 1)
            events = json.dumps([e.data for e in session.bus.recent(0)], default=str)
    ours = [r for r in caplog.records if r.name != "aiohttp.access"]
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in ours)
    assert receiver.requests[-1].headers["Authorization"].startswith("Basic ")  # used, though
    for secret in ("pa55word", "alice", "qkey42", SECRET):
        assert secret not in logged and secret not in events
    assert f"POST {receiver.url} answered 500" in events


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_a_connection_refused_is_retried_naming_the_url_without_secrets(
    tmp_path: Path,
) -> None:
    unused_tcp_port = closed_port()
    url = f"http://bob:hunter2@127.0.0.1:{unused_tcp_port}/hook?token=t0k"
    async with running(flow(url, 1, max_deliveries=2), tmp_path) as session:
        await asyncio.wait_for(session.wait(until_idle=True), 20)
        errors = [e.data["error"] for e in of_type(session, "cascade_retry")]
        (dropped,) = of_type(session, "cascade_dropped")
    assert errors and errors[0].startswith(
        f"WebhookFailed: POST http://127.0.0.1:{unused_tcp_port}"
    )
    assert "ClientConnectorError" in errors[0]
    for text in (*errors, dropped.data["reason"]):
        assert "hunter2" not in text and "t0k" not in text and "bob" not in text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "missing required option 'url'"),
        ({"url": "http://h/x", "max_deliveries": 0}, "max_deliveries must be at least 1"),
        ({"url": "http://h/x", "retry_base_s": 5, "retry_max_s": 1}, "retry_base_s"),
    ],
)
def test_bad_options_are_refused_when_the_flow_is_built(
    options: dict[str, Any], message: str
) -> None:
    inputs = {"event": "src.event"}
    builder = FlowBuilder("bad").add("src", Numbers)
    builder.add("hook", "webhook", inputs=inputs, **options)
    with pytest.raises(FlowError, match=message):
        builder.build()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "ftp://example.com/x"}, "must be an http:// or https:// URL"),
        ({"url": "http:///nohost"}, "with a host"),
        ({"url": "http://h/x", "timeout_s": 0}, "timeout_s"),
        ({"url": "http://h/x", "base_url": "http://h:1/?q=1"}, "base_url"),
        ({"url": "http://h/x", "secret_env": "MY_HOOK_SECRET"}, "names MY_HOOK_SECRET, which is"),
    ],
)
async def test_bad_options_are_refused_when_the_flow_starts(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    builder = FlowBuilder("bad").add("src", Numbers)
    builder.add("hook", "webhook", inputs={"event": "src.event"}, **options)
    session = FlowSession(builder.build(), tmp_path, settings=FAST)
    with pytest.raises(Exception, match=message) as refused:
        await session.start()
    assert "'hook'" in str(refused.value)


async def test_a_media_input_without_base_url_is_refused_at_start(tmp_path: Path) -> None:
    builder = (
        FlowBuilder("m")
        .add("cam", "camera", device="lavfi:testsrc2=size=64x48:rate=5", realtime=False)
        .add("hook", "webhook", inputs={"image": "cam.image"}, url="http://127.0.0.1:9/h")
    )
    with pytest.raises(Exception, match="input 'image' carries media: set base_url"):
        async with running(builder, tmp_path):
            pass


async def test_without_the_default_secret_posts_go_unsigned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEDIAFLOW_WEBHOOK_SECRET")
    async with receiving(lambda n: 200) as receiver, running(flow(receiver.url, 1), tmp_path):
        await receiver.wait_for(lambda: len(receiver.delivered()) == 1)
    assert SIGNATURE_HEADER not in receiver.requests[0].headers
