"""Home Assistant MQTT discovery configs for an ``mqtt`` sink. Pure.

With ``discovery = true`` the sink publishes, retained, one config per entity on
``<discovery_prefix>/<component>/mediaflow_<flow>/<object_id>/config``
(https://www.home-assistant.io/integrations/mqtt/#mqtt-discovery), so Home
Assistant creates them without YAML, grouped under one device per flow:

- a ``camera`` per image wired in (its snapshot topic, the JPEG bytes);
- a ``binary_sensor`` per ``motion`` or ``loudness`` event port wired in
  (``device_class`` ``motion`` / ``sound``): on when an event starts, off when it
  ends (a motion node with zones is on from any zone's start to any zone's end);
- a ``sensor`` per ``speech`` transcript port wired in: the last transcript (Home
  Assistant keeps 255 characters of a state);
- two ``switch`` es for the flow: *Running* (off pauses it, on resumes it) and
  *Enabled* (off disables it, on enables it), both on the flow's ``command`` topic,
  with their state from its retained ``status`` topic.

Every entity shares the flow's availability topic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from mediaflow.node import Wire
from mediaflow.nodes.mqtt_topics import Topics

EVENT_CLASSES: Final = {"motion": "motion", "loudness": "sound"}
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def object_id(*parts: str) -> str:
    """An id Home Assistant accepts in a discovery topic (``[A-Za-z0-9_-]``)."""
    return "_".join(_ID_UNSAFE.sub("_", part) for part in parts)


def device_block(flow: str, version: str) -> dict[str, Any]:
    """The device every entity of one flow belongs to."""
    return {
        "identifiers": [object_id("mediaflow", flow)],
        "name": f"mediaflow {flow}",
        "manufacturer": "mediaflow",
        "model": "flow",
        "sw_version": version,
    }


def _common(
    topics: Topics, name: str, unique: str, device: Mapping[str, Any], qos: int
) -> dict[str, Any]:
    return {
        "name": name,
        "unique_id": unique,
        "availability_topic": topics.availability,
        "payload_available": "online",
        "payload_not_available": "offline",
        "device": dict(device),
        "qos": qos,
    }


def entity_configs(
    topics: Topics, wires: Mapping[str, Wire], *, version: str, qos: int
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per ``(component, object_id)``, the config of each entity (module doc); each
    upstream port once, however many input ports read it."""
    flow = topics.flow
    device = device_block(flow, version)
    configs: dict[tuple[str, str], dict[str, Any]] = {}
    for wire in wires.values():
        oid = object_id(wire.node, wire.port)
        unique = object_id("mediaflow", flow, wire.node, wire.port)
        if wire.kind == "image":
            config = _common(topics, f"{wire.node} snapshot", unique, device, qos)
            config["topic"] = topics.snapshot(wire.node)
            configs["camera", oid] = config
        elif wire.builtin in EVENT_CLASSES and wire.port == "event":
            config = _common(topics, f"{wire.node} {wire.builtin}", unique, device, qos)
            config.update(
                state_topic=topics.state(wire.node, wire.port),
                payload_on="ON",
                payload_off="OFF",
                device_class=EVENT_CLASSES[wire.builtin],
                json_attributes_topic=topics.value(wire.node, wire.port),
                json_attributes_template="{{ value_json.value | tojson }}",
            )
            configs["binary_sensor", oid] = config
        elif wire.builtin == "speech" and wire.port == "text":
            config = _common(topics, f"{wire.node} transcript", unique, device, qos)
            config.update(
                state_topic=topics.value(wire.node, wire.port),
                value_template="{{ value_json.value[:255] }}",
                icon="mdi:text-to-speech",
            )
            configs["sensor", oid] = config
    configs.update(_switches(topics, device, qos))
    return configs


def _switches(
    topics: Topics, device: Mapping[str, Any], qos: int
) -> dict[tuple[str, str], dict[str, Any]]:
    flow = topics.flow
    running = _common(topics, "Running", object_id("mediaflow", flow, "running"), device, qos)
    running.update(
        command_topic=topics.command,
        payload_on="resume",
        payload_off="pause",
        state_topic=topics.status,
        value_template="{{ 'ON' if value == 'running' else 'OFF' }}",
        state_on="ON",
        state_off="OFF",
        icon="mdi:play-pause",
    )
    enabled = _common(topics, "Enabled", object_id("mediaflow", flow, "enabled"), device, qos)
    enabled.update(
        command_topic=topics.command,
        payload_on="enable",
        payload_off="disable",
        state_topic=topics.status,
        value_template="{{ 'OFF' if value == 'disabled' else 'ON' }}",
        state_on="ON",
        state_off="OFF",
        icon="mdi:power",
    )
    return {("switch", "running"): running, ("switch", "enabled"): enabled}


def config_topic(discovery_prefix: str, flow: str, component: str, oid: str) -> str:
    """``<discovery_prefix>/<component>/mediaflow_<flow>/<object_id>/config``."""
    return f"{discovery_prefix}/{component}/{object_id('mediaflow', flow)}/{oid}/config"
