"""Audio chunks: the record, cutting PCM into exact chunks, resampling, WAV encoding."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import av
import numpy as np
import numpy.typing as npt

Pcm = npt.NDArray[np.int16]  # shape (frames, channels), interleaved s16

MAX_CHANNELS = 8
"""The most channels a microphone may give: FFmpeg names a default layout up to 8."""


def channel_layout(channels: int) -> str:
    """FFmpeg's default layout for ``channels`` ("1c" is mono, "2c" stereo), which
    PyAV takes wherever it takes a layout name; ``ValueError`` outside 1-8."""
    if not 1 <= channels <= MAX_CHANNELS:
        raise ValueError(f"channels must be 1-{MAX_CHANNELS}, got {channels}")
    return f"{channels}c"


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """Exactly ``chunk_ms`` of s16 PCM, shape ``(frames, channels)``.

    ``pts`` is seconds since the source started, counted in samples (so consecutive
    chunks are gap-free by construction); ``index`` counts chunks produced (a gap means
    the bridge dropped chunks for a slow consumer); ``overflow_count`` is the running
    total of device overflows (PortAudio overflows and ring overruns) so far.
    """

    pcm: Pcm
    rate: int
    channels: int
    pts: float
    index: int
    overflow_count: int = 0

    @property
    def frames(self) -> int:
        """Samples per channel."""
        return int(self.pcm.shape[0])

    @property
    def duration(self) -> float:
        """Seconds of audio in this chunk."""
        return self.frames / self.rate


def encode_wav(chunk: AudioChunk) -> bytes:
    """A complete 16-bit PCM WAV file holding ``chunk``. Pure; never blocks."""
    pcm = np.ascontiguousarray(chunk.pcm, dtype="<i2").tobytes()
    return pcm_wav(pcm, chunk.rate, chunk.channels)


_HEADER = struct.Struct("<4sI4s4sIHHIIHH4sI")


def pcm_wav(pcm: bytes, rate: int, channels: int = 1) -> bytes:
    """A complete WAV file of ``pcm`` (interleaved s16 little-endian). Pure.

    The same 44 bytes of header as the ``wave`` module writes, packed directly (a
    few times cheaper; this runs on the event loop for every audio chunk). Raises
    ``ValueError`` for a rate or channel count a WAV header cannot hold."""
    if not 1 <= channels <= 0xFFFF or not 1 <= rate <= 0xFFFFFFFF:
        raise ValueError(
            f"a WAV file holds 1-65535 channels at a positive rate: {channels}, {rate}"
        )
    size = len(pcm)
    header = _HEADER.pack(
        b"RIFF", 36 + size, b"WAVE", b"fmt ", 16, 1, channels, rate,
        rate * 2 * channels, 2 * channels, 16, b"data", size,
    )  # fmt: skip
    return header + pcm


class Chunker:
    """Cuts a stream of PCM blocks into chunks of exactly ``frames`` frames. Pure."""

    def __init__(self, frames: int, channels: int) -> None:
        if frames < 1:
            raise ValueError(f"chunk must hold at least one frame, got {frames}")
        self.frames = frames
        self.channels = channels
        self._pending: list[Pcm] = []
        self._pending_frames = 0

    def push(self, block: Pcm) -> list[Pcm]:
        """Add ``block`` (shape ``(n, channels)``); return the chunks now complete."""
        if block.shape[0] == 0:
            return []
        self._pending.append(block)
        self._pending_frames += block.shape[0]
        if self._pending_frames < self.frames:
            return []
        joined = np.concatenate(self._pending)
        whole = (joined.shape[0] // self.frames) * self.frames
        chunks = [joined[i : i + self.frames] for i in range(0, whole, self.frames)]
        rest = joined[whole:]
        self._pending = [rest] if rest.shape[0] else []
        self._pending_frames = int(rest.shape[0])
        return chunks

    def flush(self) -> Pcm | None:
        """The leftover frames padded with silence to a whole chunk, or None if none."""
        if not self._pending_frames:
            return None
        joined = np.concatenate(self._pending)
        padded = np.zeros((self.frames, self.channels), dtype=np.int16)
        padded[: joined.shape[0]] = joined
        self._pending, self._pending_frames = [], 0
        return padded


class PcmResampler:
    """Converts decoded or captured audio to s16 interleaved at ``rate`` / ``channels``."""

    def __init__(self, rate: int, channels: int) -> None:
        self.rate = rate
        self.channels = channels
        self._resampler = av.AudioResampler(
            format="s16", layout=channel_layout(channels), rate=rate
        )

    def frame(self, frame: av.AudioFrame | None) -> Pcm:
        """Resample one decoded frame (``None`` flushes the resampler's delay line)."""
        blocks = [self._to_pcm(out) for out in self._resampler.resample(frame)]
        if not blocks:
            return np.zeros((0, self.channels), dtype=np.int16)
        return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)

    def pcm(self, block: Pcm, rate: int) -> Pcm:
        """Resample a captured block (shape ``(n, channels_in)``, s16) recorded at ``rate``."""
        channels_in = int(block.shape[1])
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(block).reshape(1, -1),
            format="s16",
            layout=channel_layout(channels_in),
        )
        frame.sample_rate = rate
        return self.frame(frame)

    def _to_pcm(self, frame: av.AudioFrame) -> Pcm:
        data: Pcm = frame.to_ndarray().astype(np.int16, copy=False)
        return data.reshape(-1, self.channels)
