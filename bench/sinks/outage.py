"""The sinks through an outage, each flow a ``mediaflow run`` process of its own.

**Broker** (:func:`broker_outage`): ``mosquitto``, a :class:`~.subscriber.Subscriber`
in this process, and the flow: :class:`~bench.sinks.nodes.Events` at ``rate`` a
second into ``use = "mqtt"`` (QoS 1, the defaults). After ``warmup_s + live_s`` the
broker is stopped for ``outage_s`` and started again on its port; the source goes on
emitting, ends ``post_s`` after the outage, and the run exits once every event is
acked (``--until-idle``). The flow's RSS is read from ``/proc`` every ``every_s``.

**Broker up all along** (:func:`broker_steady`): the same flow and broker, no
outage, stopped at the age the outage ends: what the process grows by anyway over
the outage's window, against which the outage's growth is read.

**Receiver** (:func:`receiver_outage`): the receiver process answers 500 from
``warmup_s + live_s`` for ``receiver_outage_s``, then 200; the flow posts to it
with the sink's default retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench._lib.sample import proc_status
from bench.sinks.judge import Arrival, arrival
from bench.sinks.procs import Broker, FlowRun, Receiver
from bench.sinks.subscriber import Subscriber

FLOW = "outage"
TOPIC = f"mediaflow/{FLOW}/src/event"
SECRET = "bench-sinks-secret"
DRAIN_S = 120.0  # after the source ends, at most, for the flow to deliver the rest


@dataclass(frozen=True)
class OutageConfig:
    outage_s: float = 60.0
    receiver_outage_s: float = 30.0
    rate: float = 20.0
    warmup_s: float = 5.0
    live_s: float = 10.0
    post_s: float = 10.0
    every_s: float = 0.25

    def events(self, outage_s: float) -> int:
        return round(self.rate * (self.warmup_s + self.live_s + outage_s + self.post_s))


@dataclass(frozen=True)
class Look:
    t: float
    rss: int


@dataclass
class OutageRun:
    marks: dict[str, float]  # monotonic times: start, down, up, exited
    looks: list[Look]
    arrival: Arrival | None
    exit_status: int | None
    retries: int  # the flow's cascade_retry log lines
    dropped: int  # its cascade_dropped (dead letter) lines
    extra: dict[str, Any] = field(default_factory=dict)


class RssWatch:
    """Reads a process's RSS every ``every_s`` until stopped."""

    def __init__(self, pid: int, every_s: float) -> None:
        self.pid, self.every_s = pid, every_s
        self.looks: list[Look] = []
        self._task = asyncio.create_task(self._watch(), name="bench rss")

    async def _watch(self) -> None:
        while True:
            try:
                rss = int(proc_status(self.pid)["VmRSS"].split()[0]) * 1024
            except (OSError, KeyError):
                return
            self.looks.append(Look(time.monotonic(), rss))
            await asyncio.sleep(self.every_s)

    async def stop(self) -> list[Look]:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        return self.looks


def mqtt_flow_file(place: Path, url: str, count: int, rate: float) -> Path:
    place.mkdir(parents=True, exist_ok=True)
    path = place / "mqtt.toml"
    path.write_text(
        f'[flow]\nname = "{FLOW}"\n\n'
        '[[node]]\nid = "src"\nuse = "bench.sinks.nodes:Events"\n'
        f"count = {count}\nrate = {rate}\n\n"
        f'[[node]]\nid = "out"\nuse = "mqtt"\nurl = "{url}"\n'
        'inputs = { event = "src.event" }\n'
    )
    return path


def webhook_flow_file(place: Path, url: str, count: int, rate: float) -> Path:
    place.mkdir(parents=True, exist_ok=True)
    path = place / "webhook.toml"
    path.write_text(
        f'[flow]\nname = "{FLOW}"\n\n'
        '[[node]]\nid = "src"\nuse = "bench.sinks.nodes:Events"\n'
        f"count = {count}\nrate = {rate}\n\n"
        f'[[node]]\nid = "hook"\nuse = "webhook"\nurl = "{url}"\n'
        'inputs = { event = "src.event" }\n'
    )
    return path


def _now() -> float:
    return time.monotonic()


def _log_counts(run: FlowRun) -> tuple[int, int]:
    text = run.log_text()
    return text.count("cascade_retry"), text.count("cascade_dropped")


async def broker_outage(config: OutageConfig, place: Path) -> OutageRun:
    """The flow through the broker's outage (module doc)."""
    broker = Broker(place / "broker")
    await asyncio.to_thread(broker.start)
    count = config.events(config.outage_s)
    flow_file = mqtt_flow_file(place / "flow", broker.url, count, config.rate)
    marks = {"start": _now()}
    run: FlowRun | None = None
    try:
        async with Subscriber(broker.port, TOPIC, "bench-outage-sub") as seen:
            run = FlowRun(flow_file, place / "flow-data")
            watch = RssWatch(run.pid, config.every_s)
            await asyncio.sleep(config.warmup_s + config.live_s)
            await asyncio.to_thread(broker.stop)
            marks["down"] = _now()
            await asyncio.sleep(config.outage_s)
            marks["down_end"] = _now()
            await asyncio.to_thread(broker.start)
            marks["up"] = _now()
            left = config.post_s + DRAIN_S
            status = await asyncio.to_thread(run.wait, left)
            marks["exited"] = _now()
            looks = await watch.stop()
            await seen.until(count, 30.0)
            got = [(value["value"]["n"], value["redelivery"] or dup) for value, dup in seen.got]
            marks["last_arrival"] = _now()
    finally:
        if run is not None:
            run.stop()
        broker.stop()
    retries, dropped = _log_counts(run)
    return OutageRun(marks, looks, arrival(count, got), status, retries, dropped)


async def broker_steady(config: OutageConfig, place: Path) -> OutageRun:
    """The same flow with the broker up all along (module doc), stopped at the age
    the outage ends."""
    broker = Broker(place / "steady-broker")
    await asyncio.to_thread(broker.start)
    count = config.events(config.outage_s)
    flow_file = mqtt_flow_file(place / "steady-flow", broker.url, count, config.rate)
    marks = {"start": _now()}
    run: FlowRun | None = None
    try:
        run = FlowRun(flow_file, place / "steady-data")
        watch = RssWatch(run.pid, config.every_s)
        await asyncio.sleep(config.warmup_s + config.live_s)
        marks["down"] = _now()
        await asyncio.sleep(config.outage_s)
        marks["down_end"] = _now()
        looks = await watch.stop()
    finally:
        if run is not None:
            run.stop()
        broker.stop()
    return OutageRun(marks, looks, None, None, 0, 0)


async def receiver_outage(config: OutageConfig, place: Path) -> OutageRun:
    """The flow through the receiver's 500s (module doc)."""
    receiver = await asyncio.to_thread(Receiver, place / "receiver", SECRET)
    count = config.events(config.receiver_outage_s)
    flow_file = webhook_flow_file(place / "hook-flow", receiver.hook, count, config.rate)
    marks = {"start": _now()}
    run: FlowRun | None = None
    try:
        async with aiohttp.ClientSession() as client:
            run = FlowRun(flow_file, place / "hook-data", MEDIAFLOW_WEBHOOK_SECRET=SECRET)
            watch = RssWatch(run.pid, config.every_s)
            await asyncio.sleep(config.warmup_s + config.live_s)
            await _answer(client, receiver.url, 500)
            marks["down"] = _now()
            await asyncio.sleep(config.receiver_outage_s)
            marks["down_end"] = _now()
            await _answer(client, receiver.url, 200)
            marks["up"] = _now()
            status = await asyncio.to_thread(run.wait, config.post_s + DRAIN_S)
            marks["exited"] = _now()
            looks = await watch.stop()
            async with client.get(f"{receiver.url}/report") as answer:
                report = await answer.json()
    finally:
        if run is not None:
            run.stop()
        receiver.stop()
    retries, dropped = _log_counts(run)
    got = [(n, redelivery) for n, redelivery, _ in report["delivered"]]
    verified = all(ok for _, _, ok in report["delivered"])
    extra = {
        "answers": report["answers"],
        "back_to_first_2xx_s": report["first_2xx_after_answer"],
    }
    return OutageRun(marks, looks, arrival(count, got, verified), status, retries, dropped, extra)


async def _answer(client: aiohttp.ClientSession, url: str, status: int) -> None:
    async with client.put(f"{url}/answer", params={"status": str(status)}) as answer:
        answer.raise_for_status()
