"""Running connectors in real flows: a recording sink, a runner, media checks."""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import av
import numpy as np

from mediaflow import Context, FlowBuilder, FlowSession, MediaRef, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.events import Event, EventBus
from mediaflow.live.hub import LiveHub
from tests.test_devices_audio import dominant_hz, rms, write_tone
from tests.test_devices_video import UnpluggedAfter, lavfi_container, make_video

__all__ = [
    "FAST",
    "FlowResult",
    "MediaSink",
    "UnpluggedAfter",
    "all_of",
    "count",
    "decode_video",
    "dominant_hz",
    "lavfi_container",
    "make_video",
    "rms",
    "run_flow",
    "sink_has",
    "wav_pcm",
    "write_tone",
]

Until = Callable[[list[Event]], bool]
FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)


@dataclass(frozen=True)
class Received:
    port: str
    ref: MediaRef
    data: bytes


class MediaSink(Node):
    """Reads whatever media is wired to it and keeps every reference with its bytes."""

    inputs: ClassVar[Mapping[str, str]] = {"image": "image", "video": "video", "audio": "audio"}
    optional_inputs: ClassVar[frozenset[str]] = frozenset(inputs)
    received: ClassVar[dict[str, list[Received]]] = {}

    async def setup(self, ctx: Context) -> None:
        MediaSink.received[ctx.node] = []

    async def run(self, ctx: Context) -> None:
        for port, ref in ctx.inputs.items():
            data = await ctx.read_artifact(ref)
            MediaSink.received[ctx.node].append(Received(port, ref, data))


@dataclass
class FlowResult:
    session: FlowSession
    events: list[Event]
    sinks: dict[str, list[Received]] = field(default_factory=dict)

    def port(self, port: str, sink: str = "sink") -> list[Received]:
        return [r for r in self.sinks.get(sink, []) if r.port == port]

    def of_type(self, event_type: str) -> list[Event]:
        return [e for e in self.events if e.type == event_type]

    def latest(self, node: str, port: str) -> Any:
        return self.session.snapshot().latest.get((node, port))


async def run_flow(
    builder: FlowBuilder,
    data_dir: Path,
    *,
    for_s: float | None = None,
    until: Until | None = None,
    timeout: float = 30.0,
    live: LiveHub | None = None,
) -> FlowResult:
    """Run the flow until idle, or for ``for_s``, or until ``until(events)`` holds; stop
    it; return what happened. Waiting for idle or ``until`` fails after ``timeout``.
    ``live``: the session's live hub (to watch its feeds)."""
    bus = EventBus(history=100_000)
    session = FlowSession(builder.build(), data_dir, settings=FAST, bus=bus, live=live)
    await session.start()
    try:
        if until is not None:
            await asyncio.wait_for(_wait_for_events(bus, until), timeout)
        elif for_s is not None:
            await session.wait(for_s=for_s)
        else:
            reason = await asyncio.wait_for(session.wait(until_idle=True), timeout)
            assert reason == "idle"
    finally:
        await session.stop()
    sinks = {name: list(items) for name, items in MediaSink.received.items()}
    MediaSink.received.clear()
    return FlowResult(session, bus.recent(0), sinks)


async def _wait_for_events(bus: EventBus, until: Until) -> None:
    while not until(bus.recent(0)):
        await asyncio.sleep(0.02)


def count(event_type: str, at_least: int) -> Until:
    """``until`` for :func:`run_flow`: ``at_least`` events of ``event_type`` happened."""
    return lambda events: sum(e.type == event_type for e in events) >= at_least


def sink_has(port: str, at_least: int, sink: str = "sink") -> Until:
    """``until`` for :func:`run_flow`: the sink has read ``at_least`` items on ``port``
    (what a source emitted just before a stop may still be waiting in the queue)."""
    return lambda _: sum(r.port == port for r in MediaSink.received.get(sink, [])) >= at_least


def all_of(*conditions: Until) -> Until:
    return lambda events: all(condition(events) for condition in conditions)


def decode_video(data: bytes) -> tuple[str, list[av.VideoFrame]]:
    """The container format name and every decoded frame of a segment."""
    with av.open(io.BytesIO(data), "r") as container:
        return container.format.name, list(container.decode(video=0))


def wav_pcm(data: bytes) -> tuple[int, int, np.ndarray]:
    """``(rate, channels, pcm[frames, channels])`` of a WAV file."""
    with wave.open(io.BytesIO(data)) as wav:
        rate, channels = wav.getframerate(), wav.getnchannels()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    return rate, channels, pcm.reshape(-1, channels)
