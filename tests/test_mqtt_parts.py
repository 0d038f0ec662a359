"""The ``mqtt`` node's pure parts: the broker's URL, topics, payloads, commands, the
Home Assistant configs (checked against its documented schemas), and a flow that
wires anything into a node that takes ``open_inputs``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mediaflow import FlowBuilder, FlowError, MediaRef, Node, load_flow
from mediaflow.engine.away import away_from
from mediaflow.flows import flow_from_dict
from mediaflow.node import DependencyAway, Wire
from mediaflow.nodes.mqtt import MqttNode
from mediaflow.nodes.mqtt_discovery import config_topic, entity_configs
from mediaflow.nodes.mqtt_link import BrokerAway
from mediaflow.nodes.mqtt_topics import (
    Activity,
    Message,
    MqttOptionError,
    Snapshot,
    Topics,
    command_action,
    message_for,
    parse_url,
)
from tests.ha_discovery_schema import problems

JPEG = MediaRef("sha256:" + "a" * 64, "image/jpeg", 10, {"seq": 3})
TOPICS = Topics("mediaflow", "home")
WIRES = {
    "cam": Wire("cam", "image", "image", "camera"),
    "moves": Wire("motion", "event", "json", "motion"),
    "loud": Wire("loud", "event", "json", "loudness"),
    "level": Wire("loud", "level", "number", "loudness"),
    "words": Wire("asr", "text", "text", "speech"),
}


@pytest.mark.parametrize(
    ("url", "public", "fields"),
    [
        ("mqtt://broker", "mqtt://broker:1883", ("broker", 1883, False, None, None)),
        ("mqtts://h:8884", "mqtts://h:8884", ("h", 8884, True, None, None)),
        ("mqtt://u:p%40ss@h:1", "mqtt://u@h:1", ("h", 1, False, "u", "p@ss")),
        ("mqtt://u@[::1]", "mqtt://u@[::1]:1883", ("::1", 1883, False, "u", None)),
    ],
)
def test_broker_urls(url: str, public: str, fields: tuple[Any, ...]) -> None:
    broker = parse_url(url)
    assert (broker.host, broker.port, broker.tls, broker.username, broker.password) == fields
    assert broker.public == public


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://u:hunter2@h", "must start with mqtt:// or mqtts://"),
        ("mqtt://u:hunter2@h:port", "its port must be a number"),
        ("mqtt://u:hunter2@h/topic", "no path or query"),
        ("mqtt://", "names no host"),
    ],
)
def test_bad_urls_are_refused_without_the_password(url: str, message: str) -> None:
    with pytest.raises(MqttOptionError, match=message) as caught:
        parse_url(url)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"qos": 3}, "qos must be 0, 1 or 2"),
        ({"topic_prefix": "a/+/b"}, "cannot be part of an MQTT topic"),
        ({"topic_prefix": "a/"}, "cannot be part of an MQTT topic"),
        ({"discovery_prefix": "#"}, "cannot be part of an MQTT topic"),
        ({"keepalive_s": 1}, "keepalive_s"),
    ],
)
def test_options_that_cannot_work_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(MqttOptionError, match=message):
        MqttNode("mqtt://h", **options)


def test_values_go_out_as_envelopes_named_after_their_upstream() -> None:
    event = {"type": "loudness", "phase": "start", "snapshot": None}
    planned = message_for(TOPICS, WIRES["loud"], event, seq=7, redelivery=False)
    assert isinstance(planned, Message)
    assert (planned.topic, planned.retain) == ("mediaflow/home/loud/event", False)
    assert json.loads(planned.payload) == {
        "flow": "home",
        "node": "loud",
        "port": "event",
        "seq": 7,
        "redelivery": False,
        "value": event,
    }
    again = message_for(TOPICS, WIRES["level"], float("nan"), seq=8, redelivery=True)
    assert isinstance(again, Message)
    assert json.loads(again.payload)["value"] is None  # JSON has no NaN
    assert json.loads(again.payload)["redelivery"] is True


def test_images_go_out_as_their_bytes_on_the_snapshot_topic() -> None:
    planned = message_for(TOPICS, WIRES["cam"], JPEG, seq=1, redelivery=False)
    assert planned == Snapshot("mediaflow/home/cam/snapshot", JPEG)
    audio = MediaRef("sha256:" + "b" * 64, "audio/wav", 4, {})
    wire = Wire("mic", "audio", "audio", "microphone")
    as_json = message_for(TOPICS, wire, audio, seq=2, redelivery=False)
    assert isinstance(as_json, Message)
    assert json.loads(as_json.payload)["value"]["digest"] == audio.digest


@pytest.mark.parametrize(
    ("payload", "action"),
    [
        (b"pause", "pause"),
        (b" Resume\n", "resume"),
        (b"DISABLE", "disable"),
        (b"enable", "enable"),
        (b"step", None),
        (b"\xff", None),
        (b"", None),
    ],
)
def test_commands(payload: bytes, action: str | None) -> None:
    assert command_action(payload) == action


def test_discovery_configs_validate_against_home_assistants_schemas() -> None:
    configs = entity_configs(TOPICS, WIRES, version="0.1.0", qos=1)
    assert sorted(configs) == [
        ("binary_sensor", "loud_event"),
        ("binary_sensor", "motion_event"),
        ("camera", "cam_image"),
        ("sensor", "asr_text"),
        ("switch", "enabled"),
        ("switch", "running"),
    ]
    for (component, oid), config in configs.items():
        topic = config_topic("homeassistant", "home", component, oid)
        assert problems(topic, config) == [], topic
    assert configs["camera", "cam_image"]["topic"] == "mediaflow/home/cam/snapshot"
    assert configs["binary_sensor", "motion_event"]["device_class"] == "motion"
    assert configs["binary_sensor", "loud_event"]["device_class"] == "sound"
    assert configs["switch", "running"]["command_topic"] == "mediaflow/home/command"
    assert {c["device"]["identifiers"][0] for c in configs.values()} == {"mediaflow_home"}


def test_the_schema_checks_catch_what_home_assistant_would_not_take() -> None:
    topic = "homeassistant/switch/mediaflow_home/running/config"
    assert problems(topic, {"name": "x"}) == ["missing required 'command_topic'"]
    assert problems(topic, {"command_topic": "a/+/b"}) == [
        "'command_topic' = 'a/+/b' is not valid for switch"
    ]
    assert problems(topic, {"command_topic": "a", "payload_onn": "x"}) == [
        "unknown key 'payload_onn' for switch"
    ]
    sensor = "homeassistant/binary_sensor/n/o/config"
    assert problems(sensor, {"state_topic": "t", "device_class": "noise"}) == [
        "'device_class' = 'noise' is not valid for binary_sensor"
    ]
    assert problems("homeassistant/switch/a b/config", {}) != []


def test_a_node_away_is_a_dependency_away() -> None:
    assert away_from(BrokerAway("MQTT broker mqtt://h:1883 is away", sent=False)) == "mqtt"
    assert away_from(DependencyAway("webhook", "x")) == "webhook"
    assert away_from(RuntimeError("x")) is None
    with pytest.raises(ValueError, match="name"):
        DependencyAway("", "x")


class Emits(Node):
    outputs = {"frame": "image", "n": "number", "doc": "json"}

    async def run(self, ctx: Any) -> None:
        return None


def test_a_node_with_open_inputs_takes_any_port_with_its_producers_kind() -> None:
    spec = (
        FlowBuilder("home")
        .add("src", Emits)
        .add("out", MqttNode, url="mqtt://h", inputs={"pic": "src.frame", "count": "src.n"})
        .build()
    )
    out = spec.nodes["out"]
    assert dict(out.input_kinds) == {"pic": "image", "count": "number"}
    assert not out.is_source
    assert [str(e.source) for e in spec.edges] == ["src.frame", "src.n"]


def test_open_inputs_still_need_real_wires() -> None:
    data = {
        "flow": {"name": "home"},
        "node": [
            {"id": "src", "use": "tests.test_mqtt_parts:Emits"},
            {"id": "out", "use": "mqtt", "url": "mqtt://h", "inputs": {"a": "src.nope"}},
            {"id": "idle", "use": "mqtt", "url": "mqtt://h"},
        ],
    }
    with pytest.raises(FlowError) as caught:
        flow_from_dict(data)
    text = str(caught.value)
    assert "node 'out': input 'a' is wired to 'src.nope', but node 'src' has no output" in text
    assert "node 'idle': it takes whatever is wired into it, and nothing is" in text


def test_the_home_sample_loads() -> None:
    samples = Path(__file__).resolve().parents[1] / "samples"
    spec = load_flow(samples / "home.toml")
    assert spec.name == "home"
    assert dict(spec.nodes["mqtt"].input_kinds) == {
        "snap": "image",
        "moves": "json",
        "sound": "json",
    }
    assert spec.nodes["mqtt"].options["discovery"] is True


def test_a_port_is_active_until_its_last_event_ends() -> None:
    """Two zones' events of one motion node: OFF only once both ended; a redelivered
    start or end changes nothing; what is no event has no state."""
    activity = Activity()

    def event(phase: str, zone: str, start: float) -> dict[str, object]:
        return {"type": "motion", "phase": phase, "source": "cam", "zone": zone, "start": start}

    assert activity.after(event("start", "door", 1.0)) == b"ON"
    assert activity.after(event("start", "gate", 1.5)) == b"ON"
    assert activity.after(event("end", "door", 1.0)) == b"ON"  # the gate still moves
    assert activity.after(event("end", "door", 1.0)) == b"ON"  # again: nothing changes
    assert activity.after(event("end", "gate", 1.5)) == b"OFF"
    assert activity.after(event("end", "gate", 1.5)) == b"OFF"
    assert activity.after({"phase": "later"}) is None and activity.after(3.0) is None
