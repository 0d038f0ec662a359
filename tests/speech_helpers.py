"""Real speech for the speech node's tests: espeak-ng sentences, flows, test nodes.

``espeak-ng -v en-us`` is used because pocketsphinx's bundled model is US English:
with espeak's default (British) voice it hears "start" as "stop".
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import os
import subprocess
import wave
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from devices import encode_wav, open_microphone
from mediaflow import Context, FlowBuilder, FlowSession, ItemInfo, MediaRef, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.events import Event, EventBus
from mediaflow.engine.services import Services
from mediaflow.nodes.recognizer import Result
from mediaflow.nodes.speech import SpeechNode
from mediaflow.timeline import NotedEvent, TimelineIndex
from mediaflow.timeline.times import LATEST

REPO = Path(__file__).resolve().parent.parent
GRAMMAR = REPO / "samples" / "grammar" / "commands.gram"
SENTENCES = ("turn on the lights", "start recording", "what time is it", "open the door")
SILENCE_S = 0.6
RATE = 16000
FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)

Samples = npt.NDArray[np.int16]
T = TypeVar("T")


def speak(text: str, out: Path, *, rate: int = RATE, channels: int = 1) -> Samples:
    """``text`` spoken by espeak-ng, converted by sox; written to ``out`` and returned
    (shape ``(frames, channels)``). sox's ``-R``: its dither is seeded the same way
    every run, so a near word cannot flip from one run to the next."""
    raw = out.with_suffix(".espeak.wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(raw), text], check=True)
    subprocess.run(
        ["sox", "-R", str(raw), "-r", str(rate), "-c", str(channels), "-b", "16",
         "-e", "signed-integer", str(out)],
        check=True,
    )  # fmt: skip
    return read_samples(out)


def read_samples(path: Path) -> Samples:
    with wave.open(str(path), "rb") as wav:
        data = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
        return data.reshape(-1, wav.getnchannels())


def write_wav(path: Path, samples: Samples, rate: int) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(int(samples.shape[1]))
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(np.ascontiguousarray(samples, dtype="<i2").tobytes())


def wav_bytes(samples: np.ndarray, rate: int = RATE, channels: int = 1) -> bytes:
    """``samples`` as the bytes of a 16-bit WAV file (a chunk as a connector sends it)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(np.ascontiguousarray(samples, dtype="<i2").tobytes())
    return buffer.getvalue()


@dataclass(frozen=True)
class Spoken:
    """One sentence in a track: where its voice is, in seconds of the track."""

    text: str
    start: float
    end: float


@dataclass(frozen=True)
class Track:
    path: Path
    sentences: tuple[Spoken, ...]
    duration: float

    @property
    def texts(self) -> list[str]:
        return [s.text for s in self.sentences]


def make_track(
    directory: Path,
    sentences: Sequence[str] = SENTENCES,
    *,
    rate: int = RATE,
    channels: int = 1,
    name: str = "speech",
) -> Track:
    """The sentences spoken one after another, ``SILENCE_S`` of silence before, between
    and after; the voiced part of each is found by level (espeak pads its output)."""
    silence = np.zeros((round(SILENCE_S * rate), channels), dtype=np.int16)
    parts: list[Samples] = [silence]
    spoken: list[Spoken] = []
    at = len(silence)
    for index, text in enumerate(sentences):
        voice = speak(text, directory / f"{name}-{index}.wav", rate=rate, channels=channels)
        loud = np.flatnonzero(np.abs(voice).max(axis=1) > 300)
        spoken.append(Spoken(text, (at + loud[0]) / rate, (at + loud[-1]) / rate))
        parts += [voice, silence]
        at += len(voice) + len(silence)
    path = directory / f"{name}.wav"
    write_wav(path, np.concatenate(parts), rate)
    return Track(path, tuple(spoken), at / rate)


class Collector(Node):
    """Records every value it is given, per port, under its node id."""

    inputs: ClassVar[Mapping[str, str]] = {"text": "text", "partial": "text"}
    seen: ClassVar[dict[str, dict[str, list[str]]]] = {}

    async def setup(self, ctx: Context) -> None:
        Collector.seen[ctx.node] = {"text": [], "partial": []}

    async def run(self, ctx: Context) -> None:
        for port, value in ctx.inputs.items():
            Collector.seen[ctx.node][port].append(value)


class TamperedMic(Node):
    """A file microphone (through :func:`devices.open_microphone`) that loses, swaps,
    corrupts or mislabels chunks: ``drop``, ``corrupt`` and ``mistype`` (saved as
    ``audio/ogg``) list chunk indexes, ``swap`` the first of each pair swapped with
    the next. ``pts`` stays contiguous, as from a source that does not know it lost
    anything, so only the sound itself can tell. ``done_file`` is written once every
    chunk was emitted."""

    outputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    def __init__(
        self,
        path: str,
        chunk_ms: int = 20,
        drop: Sequence[int] = (),
        swap: Sequence[int] = (),
        corrupt: Sequence[int] = (),
        mistype: Sequence[int] = (),
        done_file: str = "",
    ) -> None:
        self.path, self.chunk_ms, self.done_file = path, chunk_ms, done_file
        self.drop, self.swap, self.corrupt = set(drop), set(swap), set(corrupt)
        self.mistype = set(mistype)

    async def run(self, ctx: Context) -> None:
        mic = await asyncio.to_thread(
            open_microphone, f"file:{self.path}", chunk_ms=self.chunk_ms, realtime=False
        )
        async with mic:
            chunks = [encode_wav(chunk) async for chunk in mic]
        for index in sorted(self.swap):
            chunks[index], chunks[index + 1] = chunks[index + 1], chunks[index]
        kept = [(i, c) for i, c in enumerate(chunks) if i not in self.drop]
        last = ctx.more.latest("audio")  # a resumed run continues after the last emitted
        first = last.meta["seq"] + 1 if isinstance(last, MediaRef) else 0
        for seq, (index, data) in list(enumerate(kept))[first:]:
            if index in self.corrupt:
                data = b"RIFF\x10\x00\x00\x00WAVEjunk" + data[20:40]
            meta = {"seq": seq, "pts": seq * self.chunk_ms / 1000, "rate": RATE, "channels": 1}
            media_type = "audio/ogg" if index in self.mistype else "audio/wav"
            await ctx.emit("audio", await ctx.save_artifact(data, media_type, meta))
        if self.done_file:
            Path(self.done_file).write_text("done")


class ScriptedRecognizer:
    """A recogniser plugged in with ``engine``: one final result "chunk N" for every
    ``every`` seconds of audio, spanning it."""

    def __init__(self, every: float = 0.5) -> None:
        self.every = every
        self.samples = 0
        self.said = 0

    def feed(self, pcm16k: bytes) -> list[Result]:
        self.samples += len(pcm16k) // 2
        out = []
        while self.samples >= (self.said + 1) * self.every * RATE:
            start = self.said * self.every
            self.said += 1
            out.append(Result(f"chunk {self.said}", start, start + self.every, final=True))
        return out

    def flush(self) -> list[Result]:
        return []

    def reset(self) -> None:
        self.samples = self.said = 0


@dataclass
class SpeechRun:
    """What a flow run produced: values per port, transcript events, dropped items."""

    texts: list[str]
    partials: list[str]
    transcripts: list[dict[str, Any]]
    dropped: list[dict[str, Any]] = field(default_factory=list)
    chunk_meta: dict[str, Any] = field(default_factory=dict)
    noted: list[NotedEvent] = field(default_factory=list)  # the timeline index's events

    @property
    def finals(self) -> list[dict[str, Any]]:
        return [t for t in self.transcripts if t["final"]]


def microphone_flow(name: str, track: Path, *, chunk_ms: int, **options: Any) -> FlowBuilder:
    """The real path: ``connector = "microphone"`` on a file, not paced."""
    return FlowBuilder(name).add(
        "mic", "microphone", device=f"file:{track}", chunk_ms=chunk_ms, realtime=False, **options
    )


async def run_speech(
    flow: FlowBuilder, data: Path, *, source: str = "mic", timeout: float = 60, **speech: Any
) -> SpeechRun:
    """Add ``asr`` (the speech node with ``speech`` options) reading ``source.audio`` and
    a collector, run until idle, and return what came out."""
    flow = flow.add("asr", "speech", inputs={"audio": f"{source}.audio"}, **speech).add(
        "sink", Collector, inputs={"text": "asr.text", "partial": "asr.partial"}
    )
    bus = EventBus(history=200_000)
    session = FlowSession(flow.build(), data, settings=FAST, bus=bus)
    await session.start()
    try:
        reason = await asyncio.wait_for(session.wait(until_idle=True), timeout)
    finally:
        await session.stop()
    assert reason == "idle"
    events: list[Event] = bus.recent(0)
    latest = session.snapshot().latest.get((source, "audio"))
    seen = Collector.seen["sink"]
    index = TimelineIndex.in_data_dir(session.data_dir)
    try:
        noted = index.events(session.spec.name, 0.0, LATEST)
    finally:
        index.close()
    return SpeechRun(
        texts=list(seen["text"]),
        partials=list(seen["partial"]),
        transcripts=[dict(e.data) for e in events if e.type == "transcript"],
        dropped=[dict(e.data) for e in events if e.type == "cascade_dropped"],
        chunk_meta=dict(latest["$ref"]["meta"]) if isinstance(latest, dict) else {},
        noted=noted,
    )


class CountingRecognizer:
    """Counts the samples it hears; says "heard N" (N samples so far) on every feed.
    ``fail_once`` makes the first feed raise, as a broken engine would."""

    def __init__(self, fail_once: bool = False) -> None:
        self.samples = 0
        self.resets = 0
        self.fail_once = fail_once

    def feed(self, pcm16k: bytes) -> list[Result]:
        if self.fail_once:
            self.fail_once = False
            self.samples += len(pcm16k) // 2  # it had heard some of it: state is unknown
            raise RuntimeError("engine broke")
        self.samples += len(pcm16k) // 2
        return [Result(f"heard {self.samples}", 0.0, self.samples / RATE, final=True)]

    def flush(self) -> list[Result]:
        return []

    def reset(self) -> None:
        self.samples = 0
        self.resets += 1


class FakeContext:
    """Just enough of :class:`mediaflow.Context` to call a node's ``run`` directly:
    artifacts in a dict, emissions recorded, and ``emit`` failing when told to; shared
    services as a session's (close :attr:`services` after the node's teardown)."""

    def __init__(self, flow_dir: Path) -> None:
        self.flow, self.node, self.flow_dir = "f", "asr", flow_dir
        self.services = Services(FAST)
        self.inputs: dict[str, Any] = {}
        self.item: ItemInfo | None = None
        self.log = logging.getLogger("tests.speech")
        self.artifacts: dict[str, bytes] = {}
        self.emitted: list[tuple[str, str]] = []
        self.events: list[dict[str, Any]] = []
        self.more = self  # the engine's ctx.more, here the same object
        self.fail_emits = 0

    @property
    def redelivery(self) -> bool:
        return self.item is not None and self.item.deliveries > 1

    def deliver(self, seq: int, wav: bytes, pts: float | None, deliveries: int = 1) -> None:
        digest = "sha256:" + hashlib.sha256(wav).hexdigest()
        self.artifacts[digest] = wav
        meta = {"seq": seq} if pts is None else {"seq": seq, "pts": pts}
        self.inputs = {"audio": MediaRef(digest, "audio/wav", len(wav), meta)}
        self.item = ItemInfo(f"e{seq}", seq, deliveries)

    async def read_artifact(self, ref: MediaRef | str) -> bytes:
        return self.artifacts[ref.digest if isinstance(ref, MediaRef) else ref]

    async def emit(self, port: str, value: Any) -> None:
        if self.fail_emits:
            self.fail_emits -= 1
            raise ConnectionError("queue unavailable")
        self.emitted.append((port, value))

    def publish(self, event_type: str, **data: Any) -> None:
        self.events.append({"type": event_type, **data})

    def shared(self, make: Callable[[EngineSettings], T]) -> T:
        return self.services.shared(make)


class TextFile(Node):
    """Appends every ``text`` value it is given to ``path``, one per line (a sink that
    outlives its process)."""

    inputs: ClassVar[Mapping[str, str]] = {"text": "text"}

    def __init__(self, path: str) -> None:
        self.path = path

    async def run(self, ctx: Context) -> None:
        with open(self.path, "a") as fh:
            fh.write(ctx.inputs["text"] + "\n")


class CrashingSpeech(SpeechNode):
    """The speech node, except that the process dies right after it handled chunk
    ``die_after`` (its results emitted, the chunk not yet acked) once ``wait_for``
    exists: the worst moment to crash."""

    def __init__(self, die_after: int, wait_for: str, **options: Any) -> None:
        super().__init__(**options)
        self.die_after = die_after
        self.wait_for = Path(wait_for)

    async def run(self, ctx: Context) -> None:
        await super().run(ctx)
        if ctx.inputs["audio"].meta.get("seq") == self.die_after:
            # Die only once the source has finished and its end is on disk (its ack
            # and latest value are flushed within half a second): a resumed run
            # must not start it again.
            while not self.wait_for.exists():
                await asyncio.sleep(0.01)
            await asyncio.sleep(1.5)
            os._exit(3)


def crash_flow(track: Path, data: Path, out: Path, *, die_after: int | None) -> FlowBuilder:
    """Test source (100 ms chunks) → speech (crashing after ``die_after``) → a file."""
    done = data / "source-done"
    speech: Any = SpeechNode
    options: dict[str, Any] = {"grammar": str(GRAMMAR)}
    if die_after is not None:
        speech, options = CrashingSpeech, {**options, "die_after": die_after, "wait_for": str(done)}
    return (
        FlowBuilder("crash")
        .add("src", TamperedMic, path=str(track), chunk_ms=100, done_file=str(done))
        .add("asr", speech, inputs={"audio": "src.audio"}, **options)
        .add("sink", TextFile, path=str(out), inputs={"text": "asr.text"})
    )


def run_crash_flow(track: str, data: str, out: str, die_after: int | None) -> None:
    """Run :func:`crash_flow` until idle (or until it dies). For a child process."""

    async def main() -> None:
        flow = crash_flow(Path(track), Path(data), Path(out), die_after=die_after)
        session = FlowSession(flow.build(), Path(data), settings=FAST)
        await session.start()
        try:
            await asyncio.wait_for(session.wait(until_idle=True), 60)
        finally:
            await session.stop()

    asyncio.run(main())
