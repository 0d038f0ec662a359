"""``use = "mqtt"``: publish whatever is wired into the node to an MQTT broker.

The node takes any input (:attr:`~mediaflow.node.Node.open_inputs`): name its
ports as you like, ``inputs = { motion = "cam_motion.event", cam = "cam.image" }``.
Each value goes out on a topic named after the node and port it came from
(:mod:`mediaflow.nodes.mqtt_topics`): a JSON envelope, or an image's own bytes on
the retained snapshot topic. With ``discovery = true`` Home Assistant is told
what there is (:mod:`mediaflow.nodes.mqtt_discovery`), and the flow's ``command``
topic pauses, resumes, disables and enables it as the HTTP API does.

Delivery. A value's run returns only once the broker acknowledged it (QoS 1 by
default: its PUBACK), so the item is acked only then. While the broker is away
the run raises :class:`~mediaflow.nodes.mqtt_link.BrokerAway`, a
:class:`~mediaflow.node.DependencyAway`: the engine runs the item again after a
capped backoff, costing no attempt and never dead-lettering it, and the items
behind it wait in the queue (on disk), in order. A value whose publish was handed
to a connection that was then lost is sent again with ``"redelivery": true``
(the broker may have it already), as is a value redelivered after a crash
(``ctx.redelivery``); its ``seq`` is the same, so a subscriber can drop repeats.

Secrets: the URL's password is used to connect and nowhere else; logs, errors and
events name the broker as ``mqtt://user@host:port``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar, Final

import aiomqtt

from mediaflow.engine.operate import FlowStateError
from mediaflow.node import Context, Node, Wire
from mediaflow.nodes.mqtt_discovery import EVENT_CLASSES, config_topic, entity_configs
from mediaflow.nodes.mqtt_link import BrokerAway, MqttLink
from mediaflow.nodes.mqtt_topics import (
    OFFLINE,
    ONLINE,
    Activity,
    Message,
    MqttOptionError,
    Snapshot,
    Topics,
    check_topic_level,
    command_action,
    message_for,
    parse_url,
)

__all__ = ["MqttNode", "MqttOptionError"]

STATUS_POLL_S: Final = 0.5
"""How often the node looks at the flow's status (a pause over HTTP) to publish it."""


def _version() -> str:
    try:
        return version("mediaflow")
    except PackageNotFoundError:
        return "unknown"


class MqttNode(Node):
    """An MQTT sink (see the module doc).

    Options: ``url`` (``mqtt://[user:password@]host[:port]``, ``mqtts://`` for TLS
    with the system's CAs), ``topic_prefix`` (``"mediaflow"``), ``qos`` (1),
    ``client_id`` (the broker picks one without), ``discovery`` (false),
    ``discovery_prefix`` (``"homeassistant"``), ``publish_timeout_s`` (10: a broker
    that does not acknowledge within it is away), ``keepalive_s`` (30). Raises
    :class:`MqttOptionError` (a ``ValueError``) for an option that cannot work.
    """

    open_inputs: ClassVar[bool] = True
    inputs: ClassVar[Mapping[str, str]] = {}
    outputs: ClassVar[Mapping[str, str]] = {}

    def __init__(
        self,
        url: str,
        topic_prefix: str = "mediaflow",
        qos: int = 1,
        client_id: str | None = None,
        discovery: bool = False,
        discovery_prefix: str = "homeassistant",
        publish_timeout_s: float = 10.0,
        keepalive_s: int = 30,
    ) -> None:
        self.broker = parse_url(url)
        if qos not in (0, 1, 2) or isinstance(qos, bool):
            raise MqttOptionError(f"qos must be 0, 1 or 2, got {qos!r}")
        if not publish_timeout_s > 0:
            raise MqttOptionError(f"publish_timeout_s must be above 0, got {publish_timeout_s!r}")
        if isinstance(keepalive_s, bool) or not 5 <= keepalive_s <= 65535:
            raise MqttOptionError(f"keepalive_s must be 5 to 65535 seconds, got {keepalive_s!r}")
        self.prefix = check_topic_level("topic_prefix", topic_prefix)
        self.discovery_prefix = check_topic_level("discovery_prefix", discovery_prefix)
        self.qos = qos
        self.discovery = discovery
        self._client_id = client_id
        self._publish_timeout_s = float(publish_timeout_s)
        self._keepalive_s = keepalive_s
        self._topics: Topics | None = None
        self._wires: dict[str, Wire] = {}
        self._link: MqttLink | None = None
        self._ctx: Context | None = None
        self._sent_unacked: str | None = None  # entry id of a publish that may have landed
        self._status: str | None = None  # the status last published
        self._watch: asyncio.Task[None] | None = None
        self._activity: dict[tuple[str, str], Activity] = {}  # per upstream event port

    async def setup(self, ctx: Context) -> None:
        """Connect (a broker away is waited for; one that refuses raises
        :class:`~mediaflow.nodes.mqtt_link.BrokerRefused`) and watch the flow's status."""
        self._ctx = ctx
        self._topics = Topics(self.prefix, check_topic_level("the flow's name", ctx.flow))
        self._wires = dict(ctx.more.wires())
        self._link = MqttLink(
            self.broker,
            will_topic=self._topics.availability,
            client_id=self._client_id,
            keepalive_s=self._keepalive_s,
            publish_timeout_s=self._publish_timeout_s,
            on_connected=self._announce,
            on_message=self._command,
            log=ctx.log,
        )
        await self._link.start()
        self._watch = asyncio.create_task(self._watch_status(), name="mqtt status")

    def _flow_status(self) -> str | None:
        if self._ctx is None:
            return None
        try:
            return self._ctx.more.flow_status()
        except RuntimeError:  # no session controls this flow
            return None

    async def _announce(self, client: aiomqtt.Client) -> None:
        """A connection is up: discovery configs, the status, ``online``, commands."""
        topics = self._topics
        assert topics is not None  # set in setup, before the link starts
        if self.discovery:
            configs = entity_configs(topics, self._wires, version=_version(), qos=self.qos)
            for (component, oid), config in configs.items():
                topic = config_topic(self.discovery_prefix, topics.flow, component, oid)
                await client.publish(topic, json.dumps(config), qos=1, retain=True)
        status = self._flow_status()
        if status is not None:
            await client.publish(topics.status, status, qos=1, retain=True)
            self._status = status
            await client.subscribe(topics.command, qos=1)
        await client.publish(topics.availability, ONLINE, qos=1, retain=True)

    async def _command(self, message: aiomqtt.Message) -> None:
        """A message on the command topic: control the flow, publish its status."""
        ctx = self._ctx
        if ctx is None:
            return
        raw = message.payload
        payload = bytes(raw) if isinstance(raw, bytes | bytearray) else str(raw).encode()
        action = command_action(payload)
        if action is None:
            shown = payload[:40].decode("utf-8", "replace")
            ctx.log.warning("ignored MQTT command %r (pause, resume, disable or enable)", shown)
            return
        try:
            status = await ctx.more.control(action)
        except FlowStateError as exc:
            ctx.log.warning("MQTT command %r refused: %s", action, exc)
            return
        ctx.log.info("flow %r: %s over MQTT (%s)", ctx.flow, action, status)
        await self._publish_status(status)

    async def _publish_status(self, status: str) -> None:
        if self._link is None or self._topics is None or status == self._status:
            return
        self._status = status
        with contextlib.suppress(BrokerAway):  # the next connection publishes it
            await self._link.publish(Message(self._topics.status, status.encode(), True), 1)

    async def _watch_status(self) -> None:
        while True:
            await asyncio.sleep(STATUS_POLL_S)
            status = self._flow_status()
            if status is None:
                return
            await self._publish_status(status)

    async def run(self, ctx: Context) -> None:
        if self._link is None or self._topics is None:
            raise RuntimeError("MqttNode.run before setup")
        for port, value in ctx.inputs.items():
            await self._publish(ctx, self._link, self._topics, self._wires[port], value)

    async def _publish(
        self, ctx: Context, link: MqttLink, topics: Topics, wire: Wire, value: Any
    ) -> None:
        item = ctx.item
        entry = None if item is None else item.entry_id
        again = ctx.redelivery or (entry is not None and entry == self._sent_unacked)
        seq = None if item is None else item.seq
        planned = message_for(topics, wire, value, seq=seq, redelivery=again)
        if isinstance(planned, Snapshot):
            planned = Message(planned.topic, await ctx.read_artifact(planned.ref), retain=True)
        try:
            await link.publish(planned, self.qos)
        except BrokerAway as exc:
            if exc.sent:
                self._sent_unacked = entry
            raise
        self._sent_unacked = None
        if wire.builtin in EVENT_CLASSES and wire.port == "event":
            state = self._activity.setdefault((wire.node, wire.port), Activity()).after(value)
            if state is not None:  # retained: a binary sensor's state, all zones together
                await link.publish(Message(topics.state(wire.node, wire.port), state, True), 1)

    async def teardown(self) -> None:
        """``offline`` on the availability topic, then disconnect."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._link is not None and self._topics is not None:
            await self._link.close([Message(self._topics.availability, OFFLINE, True)])
        self._link = None
