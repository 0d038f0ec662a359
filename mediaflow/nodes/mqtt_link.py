"""One ``mqtt`` node's connection to its broker: made in setup, kept, closed in teardown.

:meth:`MqttLink.start` tries the broker once. A broker that refuses (a wrong
password, a client not allowed) fails the flow's start with
:class:`BrokerRefused`, which names the broker without its password: that needs an
operator. A broker that does not answer does not: the link keeps trying in the
background, waiting :func:`~mediaflow.engine.away.pause_s` between tries (0.2 s
doubling to 5 s), and whatever the node publishes meanwhile raises
:class:`BrokerAway` (a :class:`~mediaflow.node.DependencyAway`: the item waits in
the queue, costing no attempt).

Each connection carries a last will (``offline``, retained, on the availability
topic); once up, ``on_connected`` publishes what a subscriber needs first (the
discovery configs, the flow's status, ``online``) and incoming messages (the
command topic) go to ``on_message``, one at a time. A connection lost ends its
publishes in flight (it cancels their tasks) with :class:`BrokerAway`: acknowledged
or not, the caller cannot tell, so it sends again (marked as a redelivery).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
from collections.abc import Awaitable, Callable
from typing import Final

import aiomqtt
from aiomqtt.exceptions import MqttConnectError

from mediaflow.engine.away import pause_s
from mediaflow.node import DependencyAway
from mediaflow.nodes.mqtt_topics import OFFLINE, Broker, Message

FIRST_TRY_S: Final = 5.0
"""How long setup waits for the broker's first answer before going on without it."""
UP_GRACE_S: Final = 1.0
"""How long a publish waits for a connection being made before calling the broker
away (an item that arrives while the link reconnects need not fail at once)."""

OnConnected = Callable[[aiomqtt.Client], Awaitable[None]]
OnMessage = Callable[[aiomqtt.Message], Awaitable[None]]


class BrokerRefused(RuntimeError):
    """The broker answered and refused us (a wrong user name or password, a client
    id not allowed). The message names the broker without the password."""


class BrokerAway(DependencyAway):
    """The broker is away: not connected, or lost before it acknowledged. ``sent``:
    the message was handed to the broker's connection (it may have arrived)."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__("mqtt", message)
        self.sent = sent


class MqttLink:
    """The connection of one node (see the module doc). Not thread-safe; one loop."""

    def __init__(
        self,
        broker: Broker,
        *,
        will_topic: str,
        client_id: str | None,
        keepalive_s: int,
        publish_timeout_s: float,
        on_connected: OnConnected,
        on_message: OnMessage,
        log: logging.Logger,
    ) -> None:
        self.broker = broker
        self._will = aiomqtt.Will(will_topic, OFFLINE, qos=1, retain=True)
        self._client_id = client_id
        self._keepalive_s = keepalive_s
        self._timeout_s = publish_timeout_s
        self._on_connected = on_connected
        self._on_message = on_message
        self._log = log
        self._client: aiomqtt.Client | None = None
        self._up = asyncio.Event()
        self._publishing: set[asyncio.Task[object]] = set()  # tasks awaiting a PUBACK
        self._cut_off: set[asyncio.Task[object]] = set()  # of those, cancelled by _cut
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def _new_client(self) -> aiomqtt.Client:
        broker = self.broker
        return aiomqtt.Client(
            broker.host,
            broker.port,
            username=broker.username,
            password=broker.password,
            identifier=self._client_id,
            will=self._will,
            keepalive=self._keepalive_s,
            timeout=self._timeout_s,
            tls_context=ssl.create_default_context() if broker.tls else None,
            logger=self._log,
        )

    async def start(self) -> None:
        """Try the broker once, then keep the connection in the background. Raises
        :class:`BrokerRefused` when the broker refuses; a broker away is logged."""
        first = self._new_client()
        client: aiomqtt.Client | None = None
        try:
            await asyncio.wait_for(first.__aenter__(), FIRST_TRY_S)
            client = first
        except MqttConnectError as exc:
            raise BrokerRefused(self._refusal(exc)) from None
        except (aiomqtt.MqttError, TimeoutError, OSError) as exc:
            self._log.warning(
                "MQTT broker %s is away (%s): items wait in the queue until it answers",
                self.broker.public,
                exc or type(exc).__name__,
            )
        self._task = asyncio.create_task(self._keep(client), name=f"mqtt {self.broker.public}")

    def _refusal(self, exc: MqttConnectError) -> str:
        return f"MQTT broker {self.broker.public} refused the connection: {exc}"

    async def _keep(self, client: aiomqtt.Client | None) -> None:
        failures = 0
        while not self._closing:
            if client is None:
                client = self._new_client()
                try:
                    await client.__aenter__()
                except MqttConnectError as exc:
                    self._log.error("%s; trying again", self._refusal(exc))
                    client = None
                except aiomqtt.MqttError as exc:
                    self._log.debug("MQTT broker %s still away: %s", self.broker.public, exc)
                    client = None
            if client is not None:
                failures = 0
                await self._serve(client)
                client = None
                if self._closing:
                    return
                self._log.warning(
                    "lost the MQTT broker %s: items wait in the queue until it is back",
                    self.broker.public,
                )
            failures += 1
            await asyncio.sleep(pause_s(failures))

    async def _serve(self, client: aiomqtt.Client) -> None:
        """One connection's life: announce, then hand on messages until it drops."""
        self._client = client
        try:
            await self._on_connected(client)
            self._up.set()
            self._log.info("connected to the MQTT broker %s", self.broker.public)
            async for message in client.messages:
                await self._on_message(message)
        except aiomqtt.MqttError as exc:
            self._log.debug("MQTT connection to %s ended: %s", self.broker.public, exc)
        finally:
            self._up.clear()
            self._client = None
            self._cut()
            with contextlib.suppress(aiomqtt.MqttError):
                await client.__aexit__(None, None, None)

    async def publish(self, message: Message, qos: int) -> None:
        """Publish ``message`` and return once the broker took it (QoS 1: its
        PUBACK; QoS 2: PUBCOMP; QoS 0: once written). Raises :class:`BrokerAway`
        when the broker is away or the connection is lost first, or it does not
        answer within ``publish_timeout_s``. Runs in the caller's task: a lost
        connection cancels it (:meth:`_cut`), which this turns into
        :class:`BrokerAway`; a cancel from anyone else goes through."""
        if not self._up.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._up.wait(), UP_GRACE_S)
        client, task = self._client, asyncio.current_task()
        if client is None or task is None or not self._up.is_set():
            raise BrokerAway(f"MQTT broker {self.broker.public} is away", sent=False)
        self._publishing.add(task)
        try:
            # No task per publish (asyncio.wait_for and asyncio.wait each make one):
            # with one message in flight, every loop turn is latency. A task per
            # publish cost 10-40 % of the events/s at QoS 1 (bench.sinks).
            async with asyncio.timeout(self._timeout_s):
                await client.publish(
                    message.topic, message.payload, qos=qos, retain=message.retain,
                    timeout=math.inf,
                )  # fmt: skip
        except aiomqtt.MqttError as exc:
            raise BrokerAway(
                f"MQTT broker {self.broker.public} did not take a message: {exc}", sent=True
            ) from None
        except TimeoutError:
            raise BrokerAway(
                f"MQTT broker {self.broker.public} did not answer within {self._timeout_s:g} s"
                " before it acknowledged a message",
                sent=True,
            ) from None
        except asyncio.CancelledError:
            if task not in self._cut_off:
                raise
            task.uncancel()
            raise BrokerAway(
                f"MQTT broker {self.broker.public} was lost before it acknowledged a message",
                sent=True,
            ) from None
        finally:
            self._publishing.discard(task)
            self._cut_off.discard(task)

    def _cut(self) -> None:
        """The connection is gone: end the publishes waiting on it (aiomqtt would
        wait out their timeout; a PUBACK can no longer come)."""
        for task in self._publishing - self._cut_off:
            self._cut_off.add(task)
            task.cancel("the MQTT connection was lost")

    async def close(self, last_words: list[Message]) -> None:
        """Publish ``last_words`` (QoS 1, a second at most: ``offline``) if connected,
        then disconnect (gracefully: the will is not sent) and stop reconnecting."""
        self._closing = True
        client = self._client
        if client is not None and self._up.is_set():
            for message in last_words:
                with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
                    await asyncio.wait_for(
                        client.publish(message.topic, message.payload, qos=1, retain=True), 1.0
                    )
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
