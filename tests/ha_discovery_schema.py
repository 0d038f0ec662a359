"""Home Assistant's MQTT discovery schemas, written from its documentation, as checks.

No Home Assistant runs here: these are the configuration variables its docs list
for each entity type the ``mqtt`` node announces, with their types, what is
required and which values are allowed:

- https://www.home-assistant.io/integrations/mqtt/#mqtt-discovery (topic format,
  ``[a-zA-Z0-9_-]`` node and object ids, the device block, availability);
- https://www.home-assistant.io/integrations/camera.mqtt/ (``topic`` required);
- https://www.home-assistant.io/integrations/binary_sensor.mqtt/ (``state_topic``
  required; ``device_class`` from https://www.home-assistant.io/integrations/binary_sensor/#device-class);
- https://www.home-assistant.io/integrations/sensor.mqtt/ (``state_topic`` required);
- https://www.home-assistant.io/integrations/switch.mqtt/ (``command_topic`` required).

Home Assistant drops keys it does not know; these checks refuse them instead, so a
misspelt key (which would silently do nothing there) fails a test here.
:func:`problems` answers a list of what is wrong, empty for a valid config.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any], bool]

DISCOVERY_TOPIC = re.compile(
    r"^(?P<prefix>[^+#]+?)/(?P<component>[a-z_]+)/(?:(?P<node_id>[a-zA-Z0-9_-]+)/)?"
    r"(?P<object_id>[a-zA-Z0-9_-]+)/config$"
)
BINARY_SENSOR_CLASSES = frozenset(
    {
        "battery",
        "battery_charging",
        "carbon_monoxide",
        "cold",
        "connectivity",
        "door",
        "garage_door",
        "gas",
        "heat",
        "light",
        "lock",
        "moisture",
        "motion",
        "moving",
        "occupancy",
        "opening",
        "plug",
        "power",
        "presence",
        "problem",
        "running",
        "safety",
        "smoke",
        "sound",
        "tamper",
        "update",
        "vibration",
        "window",
    }
)
SWITCH_CLASSES = frozenset({"outlet", "switch"})


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def is_qos(value: Any) -> bool:
    return value in (0, 1, 2) and not isinstance(value, bool)


def is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def is_subscribe_topic(value: Any) -> bool:
    """A topic to subscribe to: wildcards allowed where MQTT allows them."""
    if not isinstance(value, str) or not value or "\0" in value or len(value.encode()) > 65535:
        return False
    levels = value.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            return False
        if "+" in level and level != "+":
            return False
    return True


def is_publish_topic(value: Any) -> bool:
    """A topic to publish to: no wildcards at all."""
    return is_subscribe_topic(value) and "+" not in value and "#" not in value


def is_template(value: Any) -> bool:
    """A Jinja2 template (balanced ``{{ }}``/``{% %}``: no Jinja here to parse it)."""
    return isinstance(value, str) and value.count("{{") == value.count("}}")


def is_icon(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[\w-]+:[\w-]+", value) is not None


def one_of(*allowed: object) -> Check:
    return lambda value: value in allowed


def is_device(value: Any) -> bool:
    """The device block: identifiers (a string or a list) or connections needed."""
    if not isinstance(value, Mapping):
        return False
    known = {
        "configuration_url",
        "connections",
        "hw_version",
        "identifiers",
        "manufacturer",
        "model",
        "model_id",
        "name",
        "serial_number",
        "suggested_area",
        "sw_version",
        "via_device",
    }
    if set(value) - known:
        return False
    ids = value.get("identifiers")
    ids_ok = isinstance(ids, str) or (
        isinstance(ids, list) and bool(ids) and all(isinstance(i, str) for i in ids)
    )
    if not (ids_ok or value.get("connections")):
        return False
    return all(isinstance(value[k], str) for k in value if k not in ("identifiers", "connections"))


COMMON: dict[str, Check] = {
    "availability_topic": is_subscribe_topic,
    "availability_template": is_template,
    "availability_mode": one_of("all", "any", "latest"),
    "payload_available": is_str,
    "payload_not_available": is_str,
    "device": is_device,
    "enabled_by_default": is_bool,
    "encoding": is_str,
    "entity_category": one_of("config", "diagnostic"),
    "icon": is_icon,
    "json_attributes_template": is_template,
    "json_attributes_topic": is_subscribe_topic,
    "name": lambda v: v is None or isinstance(v, str),
    "object_id": is_str,
    "qos": is_qos,
    "unique_id": is_str,
}

SCHEMAS: dict[str, tuple[frozenset[str], dict[str, Check]]] = {
    "camera": (
        frozenset({"topic"}),
        {"topic": is_subscribe_topic, "image_encoding": one_of("b64")},
    ),
    "binary_sensor": (
        frozenset({"state_topic"}),
        {
            "state_topic": is_subscribe_topic,
            "value_template": is_template,
            "payload_on": is_str,
            "payload_off": is_str,
            "device_class": lambda v: v in BINARY_SENSOR_CLASSES,
            "expire_after": is_positive_int,
            "off_delay": is_positive_int,
            "force_update": is_bool,
        },
    ),
    "sensor": (
        frozenset({"state_topic"}),
        {
            "state_topic": is_subscribe_topic,
            "value_template": is_template,
            "device_class": is_str,
            "state_class": one_of("measurement", "total", "total_increasing"),
            "unit_of_measurement": is_str,
            "expire_after": is_positive_int,
            "force_update": is_bool,
            "suggested_display_precision": is_positive_int,
        },
    ),
    "switch": (
        frozenset({"command_topic"}),
        {
            "command_topic": is_publish_topic,
            "command_template": is_template,
            "state_topic": is_subscribe_topic,
            "value_template": is_template,
            "payload_on": is_str,
            "payload_off": is_str,
            "state_on": is_str,
            "state_off": is_str,
            "optimistic": is_bool,
            "retain": is_bool,
            "device_class": lambda v: v in SWITCH_CLASSES,
        },
    ),
}


def problems(topic: str, config: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``config`` published on discovery ``topic`` (empty: valid)."""
    match = DISCOVERY_TOPIC.match(topic)
    if match is None:
        return [f"{topic!r} is not <prefix>/<component>/[<node_id>/]<object_id>/config"]
    component = match.group("component")
    if component not in SCHEMAS:
        return [f"no schema here for component {component!r}"]
    required, specific = SCHEMAS[component]
    checks = {**COMMON, **specific}
    found = [f"missing required {key!r}" for key in sorted(required - set(config))]
    for key, value in config.items():
        check = checks.get(key)
        if check is None:
            found.append(f"unknown key {key!r} for {component}")
        elif not check(value):
            found.append(f"{key!r} = {value!r} is not valid for {component}")
    if "device" in config and "unique_id" not in config:
        found.append("a device block needs a unique_id")
    if "availability" in config and "availability_topic" in config:
        found.append("availability and availability_topic exclude each other")
    return found
