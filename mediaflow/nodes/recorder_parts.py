"""The recorder's pieces: a segment, a clip being built, an audio chunk as PCM, and
laying audio out on a clip's wall-clock timeline. Pure (numpy and the WAV reader)."""

from __future__ import annotations

import io
import wave
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mediaflow.media import MediaRef
from mediaflow.nodes.recorder_mux import ClipAudio

AUDIO_NAMES = {"aac": "aac", "libopus": "opus", "opus": "opus"}


@dataclass(frozen=True)
class Segment:
    ref: MediaRef
    seq: int | None
    pts: float
    duration: float
    captured_at: float
    width: int
    height: int
    codec: str
    fps: float
    audio_codec: str | None = None  # the sound a copied camera's segment carries

    @property
    def end(self) -> float:
        return self.pts + self.duration

    @property
    def end_at(self) -> float:
        """The end on the capture clock."""
        return self.captured_at + self.duration

    def follows(self, other: Segment) -> bool:
        """Whether this segment continues ``other`` in one clip."""
        slack = 0.5 / self.fps
        return (self.ref.media_type, self.codec, self.width, self.height, self.audio_codec) == (
            other.ref.media_type,
            other.codec,
            other.width,
            other.height,
            other.audio_codec,
        ) and abs(self.pts - other.end) <= slack


@dataclass
class Clip:
    segments: list[Segment] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return self.segments[-1].end - self.segments[0].pts

    @property
    def start(self) -> float:
        return self.segments[0].captured_at

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class Chunk:
    captured_at: float
    rate: int
    pcm: np.ndarray  # int16 [frames, channels]

    @property
    def end(self) -> float:
        return self.captured_at + len(self.pcm) / self.rate


def number(meta: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = meta.get(key)
    return float(value) if isinstance(value, int | float) else default


def segment_of(ref: MediaRef) -> Segment:
    meta = ref.meta
    fps = number(meta, "fps", 30.0) or 30.0
    seq = meta.get("seq")
    return Segment(
        ref=ref,
        seq=seq if isinstance(seq, int) else None,
        pts=number(meta, "pts"),
        duration=number(meta, "duration", 1 / fps),
        captured_at=number(meta, "captured_at"),
        width=int(number(meta, "width")),
        height=int(number(meta, "height")),
        codec=str(meta.get("codec", "")),
        fps=fps,
        audio_codec=meta["audio_codec"] if isinstance(meta.get("audio_codec"), str) else None,
    )


def read_wav_chunk(data: bytes, captured_at: float) -> Chunk:
    """A WAV chunk as int16 PCM (``ValueError`` for anything else)."""
    with wave.open(io.BytesIO(data)) as wav:
        if wav.getsampwidth() != 2:
            raise ValueError(f"only 16-bit WAV is recorded, got {8 * wav.getsampwidth()}-bit")
        channels, rate = wav.getnchannels(), wav.getframerate()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    return Chunk(captured_at, rate, pcm.reshape(-1, channels))


def lay_out_audio(chunks: list[Chunk], start: float, duration: float) -> ClipAudio:
    """The audio of ``[start, start + duration)`` (wall clock); silence where none."""
    rate = chunks[0].rate if chunks else 16000
    channels = min(chunks[0].pcm.shape[1], 2) if chunks else 1
    track = np.zeros((round(duration * rate), channels), dtype=np.int16)
    for chunk in chunks:
        if chunk.rate != rate or chunk.pcm.shape[1] < channels:
            continue  # a format change mid-clip: skipped rather than resampled
        offset = round((chunk.captured_at - start) * rate)
        begin, stop = max(offset, 0), min(offset + len(chunk.pcm), len(track))
        if begin < stop:
            track[begin:stop] = chunk.pcm[begin - offset : stop - offset, :channels]
    return ClipAudio(track, rate)
