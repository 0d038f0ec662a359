"""A subscriber to the bench's event topic that rides out the broker's outage.

QoS 1 with a session the broker keeps (``clean_session=False`` and a fixed client
id; the broker persists it across its restart), reconnecting every 0.1 s while the
broker is away. It keeps each message's payload and its MQTT DUP flag (the broker
sending it again): aiomqtt's messages drop that flag, so it is read from paho's
message first (aiomqtt names no public way to it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

import aiomqtt

from bench.sinks.procs import HOST

QUIET = logging.getLogger("bench.sinks.subscriber")
QUIET.setLevel(logging.CRITICAL)  # its socket errors while the broker is away are the point


class Subscriber:
    """Collects ``(payload JSON, dup)`` on ``topic`` in arrival order; an async
    context manager (entered once it subscribed)."""

    def __init__(self, port: int, topic: str, client_id: str) -> None:
        self.port, self.topic, self.client_id = port, topic, client_id
        self.got: list[tuple[dict[str, Any], bool]] = []
        self._dup: list[bool] = []
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Subscriber:
        self._task = asyncio.create_task(self._run(), name="bench subscriber")
        await asyncio.wait_for(self._ready.wait(), 30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            client = aiomqtt.Client(
                HOST, self.port, identifier=self.client_id, clean_session=False, logger=QUIET
            )
            self._note_dup(client)
            try:
                async with client:
                    await client.subscribe(self.topic, qos=1)
                    self._ready.set()
                    async for message in client.messages:
                        raw = message.payload
                        assert isinstance(raw, bytes | bytearray)
                        self.got.append((json.loads(raw), self._dup.pop(0)))
            except aiomqtt.MqttError:
                self._dup.clear()
                await asyncio.sleep(0.1)

    def _note_dup(self, client: aiomqtt.Client) -> None:
        paho = client._client
        handle = paho.on_message
        assert handle is not None

        def noted(paho_client: Any, userdata: Any, message: Any) -> None:
            self._dup.append(bool(message.dup))
            handle(paho_client, userdata, message)

        paho.on_message = noted

    def distinct(self) -> int:
        return len({value["value"]["n"] for value, _ in self.got})

    async def until(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` distinct events arrived; False past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.distinct() < count:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True
