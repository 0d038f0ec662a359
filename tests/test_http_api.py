"""The API next to a real running flow and without one: flows, backlog, devices,
health, metrics, the event stream (SSE) and the ``serve`` command."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.events import Event, EventBus
from mediaflow.queue import QueueUnavailable, SqliteQueue
from mediaflow.server import AppState, ServerSettings
from tests.http_support import HOST, Served, serve, wait_until

FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)


class Camera(Node):
    """Saves ``count`` tiny images and emits each with a caption."""

    outputs: ClassVar[Mapping[str, str]] = {"image": "image", "caption": "text"}

    def __init__(self, count: int = 3) -> None:
        self.count = count

    async def run(self, ctx: Context) -> None:
        for i in range(self.count):
            ref = await ctx.save_artifact(b"jpeg %d" % i, "image/jpeg", meta={"seq": i})
            await ctx.emit("image", ref)
            await ctx.emit("caption", f"frame {i}")


class Gate(Node):
    """Reads images and waits for ``opened`` before finishing each: a backlog builds up."""

    inputs: ClassVar[Mapping[str, str]] = {"image": "image"}
    opened: ClassVar[asyncio.Event | None] = None

    async def run(self, ctx: Context) -> None:
        assert Gate.opened is not None
        await Gate.opened.wait()


def flow(count: int = 3) -> FlowBuilder:
    return (
        FlowBuilder("desk")
        .add("cam", Camera, count=count)
        .add("gate", Gate, inputs={"image": "cam.image"})
    )


async def get_json(served: Served, path: str) -> tuple[int, Any]:
    async with served.client.get(served.url + path) as response:
        return response.status, await response.json()


async def test_flows_of_a_running_session(tmp_path: Path) -> None:
    Gate.opened = asyncio.Event()
    session = FlowSession(flow(5).build(), tmp_path, settings=FAST)
    await session.start()
    try:
        state = AppState.for_session(session, settings=ServerSettings())
        async with serve(tmp_path, state=state) as served:
            # The view shows what live views were told: durable values only.
            await wait_until(
                lambda: session.snapshot().told.get(("cam", "caption"), (0,))[0] == "frame 4"
            )
            status, listing = await get_json(served, "/api/flows")
            assert status == 200 and listing["queue"] == "ok"
            (summary,) = listing["flows"]
            assert summary["name"] == "desk" and summary["live"] is True and summary["nodes"] == 2
            status, view = await get_json(served, "/api/flows/desk")
            assert status == 200
            nodes = {n["id"]: n for n in view["nodes"]}
            cam, gate = nodes["cam"], nodes["gate"]
            assert cam["role"] == "source"
            assert cam["outputs"]["image"]["kind"] == "image"
            # A live latest value says which emission it is (a source runs for no item).
            assert cam["outputs"]["caption"] == {"kind": "text", "latest": "frame 4", "seq": 5}
            latest_image = cam["outputs"]["image"]["latest"]
            assert latest_image["media_type"] == "image/jpeg" and latest_image["meta"]["seq"] == 4
            assert gate["inputs"] == {"image": {"kind": "image", "from": "cam.image"}}
            assert view["edges"] == [{"from": "cam.image", "to": "gate.image"}]
            # Five items wait for the gate: the backlog in items and in seconds.
            await asyncio.sleep(0.05)
            status, view = await get_json(served, "/api/flows/desk")
            gate = next(n for n in view["nodes"] if n["id"] == "gate")
            assert gate["backlog"]["items"] == 5
            assert gate["backlog"]["oldest_s"] >= 0.05
            assert gate["in_memory"]["running"] is True
            async with served.client.get(
                f"{served.url}/artifacts/{latest_image['digest']}"
            ) as response:
                assert await response.read() == b"jpeg 4"
            assert (await get_json(served, "/api/flows/nope"))[0] == 404
            assert (await get_json(served, "/api/flows/bad%20name"))[0] == 400
            Gate.opened.set()
            await asyncio.wait_for(session.wait(until_idle=True), 20)
            metrics = await scrape(served)
            assert metrics[("mediaflow_items_finished_total", (("flow", "desk"),))] >= 6
            assert (
                metrics[
                    ("mediaflow_emit_to_start_seconds_count", (("flow", "desk"), ("node", "gate")))
                ]
                == 5
            )
            assert metrics[("mediaflow_queue_acked_total", ())] >= 5
            assert metrics[("mediaflow_artifacts_bytes", ())] > 0
            assert metrics[("mediaflow_queue_up", ())] == 1
            route = (("method", "GET"), ("route", "/api/flows/{flow}"), ("status", "200"))
            key = ("mediaflow_http_requests_total", route)
            assert metrics[key] >= 2
    finally:
        Gate.opened.set()
        await session.stop()


async def scrape(served: Served) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with served.client.get(served.url + "/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            if "le" not in sample.labels:
                samples[(sample.name, labels)] = sample.value
    return samples


async def test_capture_losses_reach_the_metrics(tmp_path: Path) -> None:
    """The running totals a connector reports on the bus (``frames_skipped``,
    ``audio_overflow``) are scraped per flow, node, device and stage."""
    async with serve(tmp_path) as served:
        bus = served.state.bus
        where = {"flow": "cams", "node": "cam", "device": "lavfi:testsrc"}
        bus.publish("frames_skipped", {**where, "total": 3, "new": 3, "capture": 1, "jpeg": 2})
        bus.publish("frames_skipped", {**where, "total": 9, "new": 6, "capture": 4, "jpeg": 5})
        bus.publish(
            "audio_overflow",
            {"flow": "mics", "node": "mic", "device": "default", "total": 2, "new": 2,
             "overflows": 2, "dropped": 0},
        )  # fmt: skip
        bus.publish("device_lost", {**where, "error": "gone"})  # not a loss count
        metrics = await scrape(served)
    losses = {
        dict(labels)["device"] + "/" + dict(labels)["stage"]: value
        for (name, labels), value in metrics.items()
        if name == "mediaflow_capture_losses_total"
    }
    assert losses == {
        "lavfi:testsrc/capture": 4,
        "lavfi:testsrc/jpeg": 5,
        "default/overflows": 2,
        "default/dropped": 0,
    }
    key = (
        "mediaflow_capture_losses_total",
        (("device", "lavfi:testsrc"), ("flow", "cams"), ("media", "video"), ("node", "cam"),
         ("stage", "jpeg")),
    )  # fmt: skip
    assert metrics[key] == 5


async def test_serve_shows_stored_flows_after_the_run(tmp_path: Path) -> None:
    Gate.opened = asyncio.Event()
    Gate.opened.set()
    session = FlowSession(flow(2).build(), tmp_path, settings=FAST)
    await session.start()
    await asyncio.wait_for(session.wait(until_idle=True), 20)
    await session.stop()
    async with serve(tmp_path) as served:
        status, listing = await get_json(served, "/api/flows")
        (summary,) = listing["flows"]
        assert summary["name"] == "desk" and summary["live"] is False
        assert summary["run"]["outcome"] == "stopped"
        status, view = await get_json(served, "/api/flows/desk")
        assert status == 200
        cam = next(n for n in view["nodes"] if n["id"] == "cam")
        assert cam["outputs"]["caption"] == {"kind": "text", "latest": "frame 1"}
        assert cam["outputs"]["image"]["kind"] == "image"


async def test_healthz(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        assert await get_json(served, "/healthz") == (200, {"ok": True, "queue": "ok"})
        queue = served.state.queue
        assert queue is not None

        async def unreachable() -> dict[str, int]:
            raise QueueUnavailable("connection refused")

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(queue, "backlog_flows", unreachable)
            status, body = await get_json(served, "/healthz")
        assert status == 503 and body["queue"] == "unavailable" and body["ok"] is False


async def test_devices(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        status, body = await get_json(served, "/api/devices")
        assert status == 200 and {"cameras", "microphones"} <= set(body)
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(sys.modules, "connectors", None)  # the package cannot be imported
            status, body = await get_json(served, "/api/devices")
        assert status == 503 and "device listing unavailable" in body["error"]


# -- server-sent events --------------------------------------------------------------


async def read_events(
    response: aiohttp.ClientResponse, count: int, timeout: float = 5.0
) -> list[dict[str, Any]]:
    """Parse ``count`` SSE messages (comments skipped) from a streaming response."""
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}

    async def pump() -> None:
        nonlocal current
        while len(events) < count:
            line = (await response.content.readline()).decode().rstrip("\n")
            if line == "":
                if "event" in current:
                    events.append(current)
                current = {}
            elif line.startswith(":"):
                current.setdefault("comments", 0)
            else:
                field, _, value = line.partition(": ")
                current[field] = json.loads(value) if field == "data" else value

    await asyncio.wait_for(pump(), timeout)
    return events


async def sse_state(tmp_path: Path, bus: EventBus, heartbeat_s: float = 15.0) -> AppState:
    return AppState(
        tmp_path,
        settings=ServerSettings(heartbeat_s=heartbeat_s),
        queue=SqliteQueue(tmp_path / "queue.sqlite3"),
        bus=bus,
        owns_backends=True,
    )


async def test_events_arrive_and_resume_without_gaps(tmp_path: Path) -> None:
    bus = EventBus(history=100)
    async with serve(tmp_path, state=await sse_state(tmp_path, bus)) as served:
        async with served.client.get(served.url + "/api/events") as response:
            assert response.headers["Content-Type"].startswith("text/event-stream")
            await asyncio.sleep(0.05)
            for i in range(3):
                bus.publish("transcript", {"flow": "desk", "text": f"line {i}"})
            first = await read_events(response, 3)
        assert [e["data"]["text"] for e in first] == ["line 0", "line 1", "line 2"]
        assert [e["event"] for e in first] == ["transcript"] * 3
        last_id = first[-1]["id"]
        for i in range(3, 8):  # published while the client is away
            bus.publish("transcript", {"flow": "desk", "text": f"line {i}"})
        async with served.client.get(
            served.url + "/api/events", headers={"Last-Event-ID": last_id}
        ) as response:
            resumed = await read_events(response, 5)
        assert [e["data"]["text"] for e in resumed] == [f"line {i}" for i in range(3, 8)]
        ids = [int(e["id"]) for e in first + resumed]
        assert ids == list(range(ids[0], ids[0] + 8))


async def test_event_types_filter_and_heartbeat(tmp_path: Path) -> None:
    bus = EventBus()
    state = await sse_state(tmp_path, bus, heartbeat_s=0.05)
    async with serve(tmp_path, state=state) as served:
        async with served.client.get(
            served.url + "/api/events?types=engine_degraded,device_lost"
        ) as response:
            heartbeat = await asyncio.wait_for(response.content.readuntil(b": heartbeat\n\n"), 5)
            assert heartbeat.endswith(b": heartbeat\n\n")
            bus.publish("transcript", {"text": "not wanted"})
            bus.publish("device_lost", {"node": "cam", "error": "unplugged"})
            (event,) = await read_events(response, 1)
        assert event["event"] == "device_lost" and event["data"]["node"] == "cam"
        async with served.client.get(served.url + "/api/events?types=bad%20type") as response:
            assert response.status == 400


async def test_an_unknown_event_type_is_refused_naming_it_and_the_known_types(
    tmp_path: Path,
) -> None:
    bus = EventBus()
    bus.publish("motion", {"node": "cam"})  # a node's own type, once published, is known
    async with serve(tmp_path, state=await sse_state(tmp_path, bus)) as served:
        url = served.url + "/api/events?types="
        async with served.client.get(url + "transcript,trancsript,gc_swep") as response:
            assert response.status == 400
            message = (await response.json())["error"]
        assert "unknown event types: gc_swep, trancsript." in message
        for known in ("transcript", "latest", "gc_swept", "device_lost"):
            assert known in message.split("types are ")[1]
        async with served.client.get(url + "transcript,motion,latest") as response:
            assert response.status == 200
        async with served.client.get(url + "motions") as response:
            assert response.status == 400
            assert "unknown event type: motions." in (await response.json())["error"]


async def test_resume_after_the_ring_overflowed_says_what_was_missed(tmp_path: Path) -> None:
    bus = EventBus(history=5)
    async with serve(tmp_path, state=await sse_state(tmp_path, bus)) as served:
        for i in range(20):
            bus.publish("transcript", {"text": str(i)})
        async with served.client.get(served.url + "/api/events?after=3") as response:
            events = await read_events(response, 6)
        assert events[0]["event"] == "events_dropped" and "id" not in events[0]
        assert events[0]["data"]["missed"] == 12
        assert [e["data"]["text"] for e in events[1:]] == [str(i) for i in range(15, 20)]


async def test_a_slow_reader_never_blocks_the_bus(tmp_path: Path) -> None:
    bus = EventBus()
    async with serve(tmp_path, state=await sse_state(tmp_path, bus)) as served:
        async with served.client.get(served.url + "/api/events") as response:
            await asyncio.sleep(0.05)
            # The client reads nothing while 20,000 events (~2 MB) are published.
            started = asyncio.get_running_loop().time()
            for i in range(20_000):
                bus.publish("transcript", {"text": "x" * 80, "n": i})
            assert asyncio.get_running_loop().time() - started < 2.0
            events = await read_events(response, 1001, timeout=10)
        # The subscription kept the newest 1,000 (drop-oldest) and says how many went.
        assert events[0]["event"] == "events_dropped"
        assert events[0]["data"] == {"missed": 19_000, "reason": "slow reader", **_time(events[0])}
        assert [e["data"]["n"] for e in events[1:]] == list(range(19_000, 20_000))


def test_listeners_see_every_event_and_a_failing_one_stops_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = EventBus()
    seen: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError("listener bug")

    stop_broken = bus.listen(broken)
    stop_seen = bus.listen(lambda event: seen.append(event.type))
    bus.publish("a")
    stop_broken()
    bus.publish("b")
    stop_seen()
    stop_seen()  # stopping twice is harmless
    bus.publish("c")
    assert seen == ["a", "b"]
    assert bus.counts == {"a": 1, "b": 1, "c": 1}
    assert "listener bug" in caplog.text


def _time(event: dict[str, Any]) -> dict[str, Any]:
    return {k: event["data"][k] for k in ("id", "type", "time")}


# -- the command -----------------------------------------------------------------------


async def test_serve_command_listens_on_loopback_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLOW_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediaflow.server", "--data", str(tmp_path), "--port", "0",
        stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
        assert line.startswith(f"mediaflow: serving on http://{HOST}:")
        url = line.split()[-1]
        async with aiohttp.ClientSession() as client, client.get(url + "/healthz") as response:
            assert response.status == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_serve_command_refuses_bad_settings(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLOW_")}
    env["MEDIAFLOW_LOCK_READS"] = "1"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediaflow.server", "--data", str(tmp_path), "--port", "0",
        stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 2 and b"MEDIAFLOW_TOKEN" in err
