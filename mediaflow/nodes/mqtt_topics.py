"""What the ``mqtt`` sink says, and where: the broker's address, topics, payloads. Pure.

Topics, under ``topic_prefix`` (``mediaflow``) and the flow's name:

- ``<prefix>/<flow>/<node>/<port>``: each value wired into the sink, named after
  the node and output port it came **from** (the upstream, not the sink: two sinks
  publish a motion node's events on the same topic). The payload is a JSON
  :func:`envelope`: ``{"flow", "node", "port", "seq", "redelivery", "value"}``.
- ``<prefix>/<flow>/<node>/snapshot``: an ``image`` value as its own bytes (a JPEG
  from a camera), retained, so a subscriber sees the newest frame at once.
- ``<prefix>/<flow>/<node>/event/state``: for a motion or loudness node's events,
  ``ON`` while any of its events lasts (one per zone) and ``OFF`` once all ended,
  retained (:class:`Activity`): what a binary sensor shows.
- ``<prefix>/<flow>/availability``: ``online`` / ``offline``, retained; ``offline``
  is also the connection's last will.
- ``<prefix>/<flow>/status``: ``running``, ``paused``, ``disabled`` or ``stopping``,
  retained; ``<prefix>/<flow>/command``: ``pause``, ``resume``, ``disable`` or
  ``enable`` (plain text) controls the flow as the HTTP API does.

Node topics have four levels and the flow's own three, so no node id can collide
with ``availability``, ``status`` or ``command``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from mediaflow.media import MediaRef
from mediaflow.node import ControlAction, Wire
from mediaflow.redact import public_url

DEFAULT_PORTS: Final = {"mqtt": 1883, "mqtts": 8883}
ONLINE: Final = b"online"
OFFLINE: Final = b"offline"


class MqttOptionError(ValueError):
    """An option of the ``mqtt`` node that cannot work (the message never quotes a
    password)."""


@dataclass(frozen=True)
class Broker:
    """Where the broker is and who we are to it. ``public`` names it without the
    password, for every message a user or a log may read."""

    host: str
    port: int
    tls: bool
    username: str | None = None
    password: str | None = None

    @property
    def public(self) -> str:
        user = f"{self.username}@" if self.username else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{host}:{self.port}"


def parse_url(url: str) -> Broker:
    """``mqtt://[user[:password]@]host[:port]`` or ``mqtts://...`` as a :class:`Broker`.
    Raises :class:`MqttOptionError` (without the password) for anything else."""
    shown = public_url(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise MqttOptionError(f"url {shown!r} is not a URL (its port must be a number)") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise MqttOptionError(f"url {shown!r} must start with mqtt:// or mqtts://")
    if not parts.hostname:
        raise MqttOptionError(f"url {shown!r} names no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise MqttOptionError(f"url {shown!r}: a broker URL has no path or query")
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    return Broker(
        parts.hostname, port or DEFAULT_PORTS[scheme], scheme == "mqtts", username, password
    )


def check_topic_level(what: str, value: str) -> str:
    """``value`` if it can be a topic's level(s): not empty, no wildcard (``+``,
    ``#``), no empty level, no NUL. Raises :class:`MqttOptionError`."""
    if not value or any(c in value for c in "+#\0") or "" in value.split("/"):
        raise MqttOptionError(
            f"{what} {value!r} cannot be part of an MQTT topic "
            "(no '+', '#', empty levels or leading/trailing '/')"
        )
    return value


@dataclass(frozen=True)
class Topics:
    """The topics of one flow under one prefix (see the module doc)."""

    prefix: str
    flow: str

    @property
    def base(self) -> str:
        return f"{self.prefix}/{self.flow}"

    @property
    def availability(self) -> str:
        return f"{self.base}/availability"

    @property
    def status(self) -> str:
        return f"{self.base}/status"

    @property
    def command(self) -> str:
        return f"{self.base}/command"

    def value(self, node: str, port: str) -> str:
        return f"{self.base}/{node}/{port}"

    def snapshot(self, node: str) -> str:
        return f"{self.base}/{node}/snapshot"

    def state(self, node: str, port: str) -> str:
        return f"{self.base}/{node}/{port}/state"


class Activity:
    """Whether any event of one port lasts: its events start and end one by one
    (a motion node's, one per zone), and the port is ``ON`` until the last has ended.
    Noting the same start or end again (a redelivery) changes nothing. Pure."""

    def __init__(self) -> None:
        self._lasting: set[tuple[Any, ...]] = set()

    def after(self, value: Any) -> bytes | None:
        """The state after event ``value``, or None for a value that is no event."""
        if not isinstance(value, dict) or value.get("phase") not in ("start", "end"):
            return None
        key = tuple(value.get(field) for field in ("type", "source", "zone", "start"))
        if value["phase"] == "start":
            self._lasting.add(key)
        else:
            self._lasting.discard(key)
        return b"ON" if self._lasting else b"OFF"


@dataclass(frozen=True)
class Message:
    """One publish: ``payload`` to ``topic``, retained or not."""

    topic: str
    payload: bytes
    retain: bool = False


@dataclass(frozen=True)
class Snapshot:
    """An image to publish as its bytes (read from the store first), retained."""

    topic: str
    ref: MediaRef


def _plain(value: Any) -> Any:
    if isinstance(value, MediaRef):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not JSON")


def envelope(flow: str, wire: Wire, value: Any, *, seq: int | None, redelivery: bool) -> bytes:
    """The JSON payload of one value: where it came from (``flow``, ``node``,
    ``port``), ``seq`` (the item's place in the sink's stream: equal for a value
    sent again, so a subscriber can drop a repeat), ``redelivery`` (true when it
    may have been published before: the broker was lost before it acknowledged, or
    mediaflow restarted) and ``value`` (a media reference as its JSON object)."""
    body = {
        "flow": flow,
        "node": wire.node,
        "port": wire.port,
        "seq": seq,
        "redelivery": redelivery,
        "value": value,
    }
    return json.dumps(body, default=_plain, separators=(",", ":"), allow_nan=False).encode()


def message_for(
    topics: Topics, wire: Wire, value: Any, *, seq: int | None, redelivery: bool
) -> Message | Snapshot:
    """What to publish for ``value`` read through ``wire``: an image's bytes on its
    snapshot topic, anything else as an :func:`envelope` on its value topic."""
    if wire.kind == "image" and isinstance(value, MediaRef):
        return Snapshot(topics.snapshot(wire.node), value)
    if isinstance(value, float) and not math.isfinite(value):
        value = None  # JSON has no NaN or infinity
    payload = envelope(topics.flow, wire, value, seq=seq, redelivery=redelivery)
    return Message(topics.value(wire.node, wire.port), payload)


def command_action(payload: bytes) -> ControlAction | None:
    """The flow control a command payload asks for (``pause``, ``resume``,
    ``disable``, ``enable``; case and surrounding blanks ignored), None for anything
    else."""
    try:
        text = payload.decode("utf-8").strip().lower()
    except UnicodeDecodeError:
        return None
    if text == "pause":
        return "pause"
    if text == "resume":
        return "resume"
    if text == "disable":
        return "disable"
    if text == "enable":
        return "enable"
    return None
