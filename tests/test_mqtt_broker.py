"""``use = "mqtt"`` against a real mosquitto (tests/mqtt_broker.py), as a user runs it:
a camera, a microphone with loudness and speech, published and announced to Home
Assistant; the flow paused from the command topic; the broker stopped mid-stream and
started again; a wrong password."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from mediaflow import FlowBuilder, FlowSession
from mediaflow.engine.events import EventBus
from mediaflow.nodes.mqtt_link import BrokerRefused
from tests.connector_helpers import FAST
from tests.ha_discovery_schema import problems
from tests.mqtt_broker import Mosquitto
from tests.redis_server import HOST
from tests.test_motion import scene

DEMO = Path(__file__).resolve().parents[1] / "mediaflow" / "demo"
SINE = "sin(2*PI*440*t)"


class Collector:
    """A subscriber to everything, QoS 1 with a session the broker keeps (it outlives
    a broker restart: the broker persists it), reconnecting until closed."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.messages: list[aiomqtt.Message] = []
        self.dup: list[bool] = []  # per message: the MQTT DUP flag (the broker sent it again)
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Collector:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self.ready.wait(), 10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        while True:
            try:
                client = aiomqtt.Client(HOST, self.port, identifier="t-sub", clean_session=False)
                self._note_dup_flags(client)
                async with client:
                    await client.subscribe("#", qos=1)
                    self.ready.set()
                    async for message in client.messages:
                        self.messages.append(message)
            except aiomqtt.MqttError:
                await asyncio.sleep(0.1)

    def _note_dup_flags(self, client: aiomqtt.Client) -> None:
        """aiomqtt's messages drop the DUP flag: read it from paho's message first."""
        paho = client._client
        handle = paho.on_message
        assert handle is not None

        def noted(paho_client: Any, userdata: Any, message: Any) -> None:
            self.dup.append(bool(message.dup))
            handle(paho_client, userdata, message)

        paho.on_message = noted

    def on(self, topic: str) -> list[bytes]:
        return [bytes(m.payload) for m in self.messages if m.topic.value == topic]  # type: ignore[arg-type]

    def json_on(self, topic: str) -> list[dict[str, Any]]:
        return [json.loads(p) for p in self.on(topic)]

    async def until(self, holds: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not holds():
            assert time.monotonic() < deadline, "timed out waiting for MQTT messages"
            await asyncio.sleep(0.05)


def tone(expression: str, duration: float) -> str:
    return f"lavfi:aevalsrc=exprs='{expression}':s=16000:d={duration}"


async def test_events_transcripts_snapshots_and_discovery_arrive(
    tmp_path: Path, mosquitto: Mosquitto
) -> None:
    flow = (
        FlowBuilder("home")
        .add("cam", "camera", device="lavfi:testsrc2=size=160x120:rate=5:d=1", fps=5)
        .add("door", "camera", device=scene("between(t,2,4)", 8), fps=10, realtime=False)
        .add("moves", "motion", inputs={"image": "door.image"})
        .add("mic", "microphone", device=f"file:{DEMO / 'speech' / 'commands.wav'}", realtime=False)
        .add("loud", "loudness", threshold_db=-35, inputs={"audio": "mic.audio"})
        .add(
            "asr",
            "speech",
            grammar=str(DEMO / "grammar" / "commands.gram"),
            inputs={"audio": "mic.audio"},
        )
        .add(
            "out",
            "mqtt",
            url=mosquitto.url,
            discovery=True,
            inputs={
                "pic": "cam.image",
                "sound": "loud.event",
                "words": "asr.text",
                "moved": "moves.event",
            },
        )
    )
    async with Collector(mosquitto.port) as seen:
        session = FlowSession(flow.build(), tmp_path, settings=FAST)
        await session.start()
        try:
            assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
            moved = seen.json_on("mediaflow/home/moves/event")
            assert [m["value"]["phase"] for m in moved] == ["start", "end"]  # one appearance
            assert all(m["value"]["type"] == "motion" for m in moved)
            assert seen.on("mediaflow/home/moves/event/state") == [b"ON", b"OFF"]
            events = seen.json_on("mediaflow/home/loud/event")
            texts = seen.json_on("mediaflow/home/asr/text")
            assert events and texts
            assert [e["value"]["phase"] for e in events] == ["start", "end"] * (len(events) // 2)
            assert all(e["node"] == "loud" and e["port"] == "event" for e in events)
            assert all(isinstance(t["value"], str) and t["value"] for t in texts)
            seqs = [m["seq"] for m in events + texts]
            assert len(set(seqs)) == len(seqs)
            snapshots = seen.on("mediaflow/home/cam/snapshot")
            assert snapshots and all(s.startswith(b"\xff\xd8") for s in snapshots)
            assert seen.on("mediaflow/home/availability")[-1] == b"online"
            assert seen.on("mediaflow/home/status")[-1] == b"running"
            await check_discovery(mosquitto.port)
            await pause_and_resume_over_mqtt(session, seen)
        finally:
            await session.stop()
        await seen.until(lambda: seen.on("mediaflow/home/availability")[-1] == b"offline")


async def retained(port: int, pattern: str, settle_s: float = 0.5) -> dict[str, bytes]:
    """The retained messages under ``pattern`` as a new subscriber gets them."""
    found: dict[str, bytes] = {}
    async with aiomqtt.Client(HOST, port) as client:
        await client.subscribe(pattern, qos=1)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(settle_s):
                async for message in client.messages:
                    assert message.retain
                    found[message.topic.value] = bytes(message.payload)  # type: ignore[arg-type]
    return found


async def check_discovery(port: int) -> None:
    configs = await retained(port, "homeassistant/#")
    assert sorted(configs) == [
        "homeassistant/binary_sensor/mediaflow_home/loud_event/config",
        "homeassistant/binary_sensor/mediaflow_home/moves_event/config",
        "homeassistant/camera/mediaflow_home/cam_image/config",
        "homeassistant/sensor/mediaflow_home/asr_text/config",
        "homeassistant/switch/mediaflow_home/enabled/config",
        "homeassistant/switch/mediaflow_home/running/config",
    ]
    for topic, payload in configs.items():
        assert problems(topic, json.loads(payload)) == [], topic
    state = await retained(port, "mediaflow/home/+")
    assert state == {"mediaflow/home/availability": b"online", "mediaflow/home/status": b"running"}
    snapshot = await retained(port, "mediaflow/home/cam/snapshot")
    assert snapshot["mediaflow/home/cam/snapshot"].startswith(b"\xff\xd8")


async def pause_and_resume_over_mqtt(session: FlowSession, seen: Collector) -> None:
    """The Running switch's payloads, as Home Assistant sends them, on the command topic."""
    async with aiomqtt.Client(HOST, seen.port) as client:
        await client.publish("mediaflow/home/command", b"pause", qos=1)
        await seen.until(lambda: session.snapshot().status == "paused", 10)
        await seen.until(lambda: seen.on("mediaflow/home/status")[-1] == b"paused", 10)
        await client.publish("mediaflow/home/command", b"resume", qos=1)
        await seen.until(lambda: session.snapshot().status == "running", 10)
        await seen.until(lambda: seen.on("mediaflow/home/status")[-1] == b"running", 10)


async def test_the_broker_stopped_mid_stream_loses_nothing(
    tmp_path: Path, mosquitto: Mosquitto
) -> None:
    """Beeps every 0.6 s for 6 s, played in real time: a loudness event starts and ends
    per beep, and a level goes out per chunk. The broker is away from about 1.5 s to
    about 3.5 s. Every value arrives, in order, repeats marked; none is dead-lettered
    and the retries say the broker was away."""
    beeps = f"if(lt(mod(t,0.6),0.3),{SINE},0)"
    flow = (
        FlowBuilder("home")
        .add("mic", "microphone", device=tone(beeps, 6), realtime=True)
        .add("loud", "loudness", min_length_s=0.1, cooldown_s=0.1, inputs={"audio": "mic.audio"})
        .add(
            "out",
            "mqtt",
            url=mosquitto.url,
            publish_timeout_s=2.0,
            inputs={"event": "loud.event", "level": "loud.level"},
        )
    )
    bus = EventBus(history=100_000)
    async with Collector(mosquitto.port) as seen:
        session = FlowSession(flow.build(), tmp_path, settings=FAST, bus=bus)
        await session.start()
        try:
            await seen.until(lambda: len(seen.on("mediaflow/home/loud/level")) >= 10, 10)
            await asyncio.to_thread(mosquitto.stop)
            await asyncio.sleep(2.0)
            await asyncio.to_thread(mosquitto.start)
            assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
        finally:
            await session.stop()
        await seen.until(lambda: len(seen.on("mediaflow/home/loud/level")) >= 60, 20)
    values = [
        (json.loads(bytes(m.payload)), dup)  # type: ignore[arg-type]
        for m, dup in zip(seen.messages, seen.dup, strict=True)
        if m.topic.value in ("mediaflow/home/loud/event", "mediaflow/home/loud/level")
    ]
    first_seen: dict[int, dict[str, Any]] = {}
    for value, dup in values:
        if value["seq"] in first_seen:
            # Sent again by mediaflow (marked), or by the broker to this subscriber (DUP).
            assert value["redelivery"] or dup, [v for v, _ in values if v["seq"] == value["seq"]]
        else:
            first_seen[value["seq"]] = value
    seqs = list(first_seen)
    assert seqs == sorted(seqs), "out of order"
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a value is missing"
    levels = [v for v in first_seen.values() if v["port"] == "level"]
    assert len(levels) == 60
    phases = [v["value"]["phase"] for v in first_seen.values() if v["port"] == "event"]
    assert phases == ["start", "end"] * 10
    assert seen.on("mediaflow/home/loud/event/state")[-1] == b"OFF"  # all ended
    kinds = [e.type for e in bus.recent(0)]
    assert "cascade_dropped" not in kinds
    retries = [e.data for e in bus.recent(0) if e.type == "cascade_retry"]
    assert retries and all(r.get("away") == "mqtt" for r in retries)
    assert all("s3cret" not in r["error"] for r in retries)


async def test_a_wrong_password_names_the_broker_but_not_the_password(
    tmp_path: Path, mosquitto_with_users: Mosquitto
) -> None:
    broker = mosquitto_with_users
    flow = (
        FlowBuilder("home")
        .add("mic", "microphone", device=tone(SINE, 1), realtime=False)
        .add("out", "mqtt", url=broker.url_for("home", "wrong-Pw"), inputs={"a": "mic.audio"})
    )
    session = FlowSession(flow.build(), tmp_path, settings=FAST)
    with pytest.raises(BrokerRefused) as caught:
        await session.start()
    message = str(caught.value)
    assert f"MQTT broker mqtt://home@{HOST}:{broker.port} refused the connection" in message
    assert "wrong-Pw" not in message
    assert "authori" in message.lower() or "password" in message.lower()


async def test_the_right_password_gets_in(tmp_path: Path, mosquitto_with_users: Mosquitto) -> None:
    broker = mosquitto_with_users
    flow = (
        FlowBuilder("home")
        .add("mic", "microphone", device=tone(SINE, 0.5), realtime=False)
        .add("loud", "loudness", inputs={"audio": "mic.audio"})
        .add("out", "mqtt", url=broker.url_for("home", "s3cret-Pw"), inputs={"l": "loud.level"})
    )
    async with aiomqtt.Client(HOST, broker.port, username="home", password="s3cret-Pw") as sub:
        await sub.subscribe("mediaflow/home/loud/level", qos=1)
        session = FlowSession(flow.build(), tmp_path, settings=FAST)
        await session.start()
        try:
            assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
        finally:
            await session.stop()
        got = []
        async with asyncio.timeout(10):
            async for message in sub.messages:
                got.append(json.loads(bytes(message.payload)))  # type: ignore[arg-type]
                if len(got) == 5:
                    break
    assert [g["seq"] for g in got] == sorted(g["seq"] for g in got)


async def test_a_broker_down_at_start_is_waited_for(tmp_path: Path, mosquitto: Mosquitto) -> None:
    await asyncio.to_thread(mosquitto.stop)
    flow = (
        FlowBuilder("home")
        .add("mic", "microphone", device=tone(SINE, 1), realtime=False)
        .add("loud", "loudness", inputs={"audio": "mic.audio"})
        .add("out", "mqtt", url=mosquitto.url, inputs={"l": "loud.level"})
    )
    session = FlowSession(flow.build(), tmp_path, settings=FAST)
    await session.start()  # does not fail: the node waits for the broker
    try:
        await asyncio.sleep(1.0)
        assert not await session._idle(session._require_runner())  # the levels wait
        await asyncio.to_thread(mosquitto.start)
        async with Collector(mosquitto.port) as seen:
            await seen.until(lambda: len(seen.on("mediaflow/home/loud/level")) >= 10, 30)
            assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
    finally:
        await session.stop()
    seqs = [v["seq"] for v in seen.json_on("mediaflow/home/loud/level")]
    assert seqs == sorted(seqs) and len(set(seqs)) == 10
