"""One throughput measurement, each in a child process of its own
(``python -m bench.sinks --child NAME``): the sink in a flow, or its bare client.

- ``mqtt_flow``: :class:`~bench.sinks.nodes.Events` emits ``n`` events as fast as it
  can into ``use = "mqtt"`` (QoS 1) in a :class:`~mediaflow.FlowSession`; timed from
  ``start()`` returning (the node connected) until ``wait(until_idle=True)`` returns:
  every event emitted, published, acknowledged by the broker (PUBACK) and acked in
  the queue.
- ``mqtt_raw``: one ``aiomqtt`` client publishing the same payloads (the sink's
  envelope, encoded per message) at QoS 1 to the same topic, ``inflight`` at a time
  (1: each publish awaited, the sink's guarantee; more: a window of tasks, in order).
  Timed from the first publish to the last PUBACK.
- ``webhook_flow``: the same source into ``use = "webhook"``, timed the same way.
- ``webhook_raw``: one ``aiohttp`` session POSTing a body of the sink's shape per
  event, signed, one after the other, each answer read.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import aiomqtt

from bench.sinks.nodes import Events, event
from bench.sinks.receiver import SIGNATURE_HEADER, sign
from mediaflow import FlowBuilder, FlowSession

FLOW = "bench"
TOPIC = f"mediaflow/{FLOW}/src/event"

Json = dict[str, Any]


def mqtt_payload(n: int) -> bytes:
    """What the sink publishes for the ``n``-th event (its envelope, compact JSON)."""
    body = {"flow": FLOW, "node": "src", "port": "event", "seq": n, "redelivery": False,
            "value": event(n)}  # fmt: skip
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


def webhook_body(n: int) -> bytes:
    """A body of the webhook sink's shape for the ``n``-th event."""
    now = time.time()
    body = {
        "id": f"{n}-0", "flow": FLOW, "node": "hook", "port": "event",
        "from": {"node": "src", "port": "event"}, "seq": n, "redelivery": False,
        "deliveries": 1, "emitted_at": now, "sent_at": now, "kind": "json",
        "value": event(n), "captured_at": None, "duration": None,
    }  # fmt: skip
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


async def _timed_flow(builder: FlowBuilder, n: int) -> Json:
    with tempfile.TemporaryDirectory(prefix="mediaflow-sinks-") as data:
        session = FlowSession(builder.build(), Path(data))
        await session.start()
        try:
            started = time.perf_counter()
            status = await session.wait(until_idle=True)
            seconds = time.perf_counter() - started
        finally:
            await session.stop()
    return {"rate": n / seconds, "seconds": seconds, "status": status}


async def mqtt_flow(args: Json) -> Json:
    url, n = f"mqtt://127.0.0.1:{args['port']}", int(args["n"])
    builder = (
        FlowBuilder(FLOW)
        .add("src", Events, count=n)
        .add("out", "mqtt", url=url, qos=1, client_id=f"flow-{uuid.uuid4().hex[:8]}",
             inputs={"event": "src.event"})
    )  # fmt: skip
    return await _timed_flow(builder, n)


async def mqtt_raw(args: Json) -> Json:
    n, window = int(args["n"]), int(args.get("inflight", 1))
    async with aiomqtt.Client("127.0.0.1", int(args["port"])) as client:
        started = time.perf_counter()
        if window == 1:
            for i in range(n):
                await client.publish(TOPIC, mqtt_payload(i), qos=1)
        else:
            pending: set[asyncio.Task[None]] = set()
            for i in range(n):
                if len(pending) >= window:
                    done, pending = await asyncio.wait(pending, return_when="FIRST_COMPLETED")
                    for task in done:
                        task.result()
                pending.add(asyncio.create_task(client.publish(TOPIC, mqtt_payload(i), qos=1)))
            for task in pending:
                await task
        seconds = time.perf_counter() - started
    return {"rate": n / seconds, "seconds": seconds}


async def webhook_flow(args: Json) -> Json:
    n = int(args["n"])
    builder = (
        FlowBuilder(FLOW)
        .add("src", Events, count=n)
        .add("hook", "webhook", url=args["url"], inputs={"event": "src.event"})
    )
    return await _timed_flow(builder, n)


async def webhook_raw(args: Json) -> Json:
    n, url, secret = int(args["n"]), args["url"], str(args["secret"]).encode()
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        started = time.perf_counter()
        for i in range(n):
            body = webhook_body(i)
            headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(secret, body)}
            async with session.post(url, data=body, headers=headers) as answer:
                await answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"the receiver answered {answer.status}")
        seconds = time.perf_counter() - started
    return {"rate": n / seconds, "seconds": seconds}


CHILDREN = {
    "mqtt_flow": mqtt_flow,
    "mqtt_raw": mqtt_raw,
    "webhook_flow": webhook_flow,
    "webhook_raw": webhook_raw,
}
