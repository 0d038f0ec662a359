"""Audio chunks on their way to a recogniser: WAV parsing, resampling, the stream clock.

* :func:`read_wav` checks and parses one ``audio/wav`` chunk (16-bit PCM, any
  rate, 1-8 channels) and raises :class:`AudioFormatError` saying what is wrong.
* :class:`MonoResampler` turns chunks of any rate and channel count into 16 kHz
  mono s16 with one PyAV resampler per input format, so filter state carries
  from chunk to chunk (a new one only when the format changes mid-stream).
* :class:`StreamClock` maps recogniser time (seconds fed since it started) back
  to the stream's time (chunk ``pts``, or counted samples when a chunk has
  none), chunk by chunk, so a hole in the stream does not shift later times.
* :func:`continuity` says whether a chunk follows the previous one, leaves a
  hole, or goes back in time. Pure.
"""

from __future__ import annotations

import enum
import io
import struct
import wave
from collections import deque
from dataclasses import dataclass
from typing import Final

import av
import numpy as np

from mediaflow.nodes.whole_utterance import SAMPLE_RATE

WAV_MEDIA_TYPES: Final = frozenset({"audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave"})

GAP_TOLERANCE_S: Final = 0.01
"""A chunk starting this close to where the previous one ended follows it."""


class AudioFormatError(ValueError):
    """A chunk is not audio the speech node can read; the message says why."""


@dataclass(frozen=True, slots=True)
class WavChunk:
    """Interleaved s16 PCM from one WAV chunk."""

    pcm: bytes
    rate: int
    channels: int

    @property
    def frames(self) -> int:
        return len(self.pcm) // (2 * self.channels)

    @property
    def duration(self) -> float:
        return self.frames / self.rate


def is_wav_media_type(media_type: str) -> bool:
    """True for ``audio/wav`` and its aliases (parameters ignored)."""
    return media_type.split(";", 1)[0].strip().lower() in WAV_MEDIA_TYPES


# The 44-byte header every writer of plain 16-bit PCM gives (the microphone's
# among them): RIFF, WAVE, a 16-byte "fmt " chunk, then "data".
_CANONICAL: Final = struct.Struct("<4sI4s4sIHHIIHH4sI")


def read_wav(data: bytes) -> WavChunk:
    """Parse a complete WAV file. Pure. Raises :class:`AudioFormatError` when it is
    not a WAV, is not 16-bit PCM, has 0 or more than 8 channels, or is truncated.

    A canonical header of 16-bit PCM (:func:`canonical_wav`) is read directly,
    about 8x cheaper than the ``wave`` module, which reads every other layout."""
    canonical = canonical_wav(data)
    if canonical is not None:
        return canonical
    try:
        with wave.open(io.BytesIO(data), "rb") as wav:
            channels, width, rate = wav.getnchannels(), wav.getsampwidth(), wav.getframerate()
            frames = wav.getnframes()
            pcm = wav.readframes(frames)
    except (wave.Error, EOFError, RuntimeError, struct.error) as exc:
        # The stdlib parser raises a bare EOFError or RuntimeError for some damage.
        detail = str(exc) or ("truncated" if isinstance(exc, EOFError) else "malformed chunks")
        raise AudioFormatError(f"not a readable WAV file ({detail})") from None
    if width != 2:
        raise AudioFormatError(f"expected 16-bit PCM, got {8 * width}-bit samples")
    if not 1 <= channels <= 8:
        raise AudioFormatError(f"expected 1-8 channels, got {channels}")
    if rate <= 0:
        raise AudioFormatError(f"sample rate must be positive, got {rate}")
    if len(pcm) != frames * channels * width:
        raise AudioFormatError(
            f"truncated: the header announces {frames} frames, the data holds "
            f"{len(pcm) // (channels * width)}"
        )
    return WavChunk(pcm, rate, channels)


def canonical_wav(data: bytes) -> WavChunk | None:
    """``data`` read directly when its header is the canonical 44 bytes of 16-bit PCM
    with 1-8 channels at a positive rate, else None (let :func:`read_wav` decide).
    Pure. Raises :class:`AudioFormatError` when such a file is truncated."""
    if len(data) < _CANONICAL.size:
        return None
    riff, _, wave_id, fmt, fmt_size, tag, channels, rate, _, _, bits, data_id, size = (
        _CANONICAL.unpack_from(data)
    )
    if (riff, wave_id, fmt, fmt_size, tag, bits, data_id) != (
        b"RIFF",
        b"WAVE",
        b"fmt ",
        16,
        1,
        16,
        b"data",
    ) or not (1 <= channels <= 8 and rate > 0):
        return None
    frames = size // (2 * channels)
    pcm = bytes(memoryview(data)[_CANONICAL.size : _CANONICAL.size + frames * 2 * channels])
    if len(pcm) != frames * 2 * channels:
        raise AudioFormatError(
            f"truncated: the header announces {frames} frames, the data holds "
            f"{len(pcm) // (2 * channels)}"
        )
    return WavChunk(pcm, rate, channels)


class MonoResampler:
    """Any rate and channel count to 16 kHz mono s16, with state kept across chunks.

    16 kHz mono passes through untouched. Not thread-safe; call from one thread.
    """

    def __init__(self) -> None:
        self._format: tuple[int, int] | None = None
        self._resampler: av.AudioResampler | None = None

    def convert(self, chunk: WavChunk) -> bytes:
        """The chunk at 16 kHz mono (the resampler may hold back a few samples)."""
        out = bytearray()
        if (chunk.rate, chunk.channels) != self._format:
            out += self._drain()
            self._format = (chunk.rate, chunk.channels)
            if self._format != (SAMPLE_RATE, 1):
                self._resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
        if self._resampler is None:
            return bytes(out) + chunk.pcm
        if chunk.frames == 0:
            return bytes(out)
        samples = np.frombuffer(chunk.pcm, dtype="<i2").reshape(1, -1)
        # "Nc" is FFmpeg's default layout for N channels, as the microphone names it.
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout=f"{chunk.channels}c")
        frame.sample_rate = chunk.rate
        for converted in self._resampler.resample(frame):
            out += converted.to_ndarray().astype("<i2", copy=False).tobytes()
        return bytes(out)

    def _drain(self) -> bytes:
        if self._resampler is None:
            return b""
        tail = b"".join(
            f.to_ndarray().astype("<i2", copy=False).tobytes()
            for f in self._resampler.resample(None)
        )
        self._resampler = None
        return tail


class Continuity(enum.Enum):
    FIRST = "first"  # nothing came before (in this process, or since a restart)
    FOLLOWS = "follows"  # starts where the previous chunk ended
    GAP = "gap"  # starts later: audio is missing (a dead-lettered chunk, a device hole)
    REWIND = "rewind"  # starts earlier: chunks out of order, or a source that restarted


def continuity(expected: float | None, pts: float | None) -> Continuity:
    """How a chunk starting at ``pts`` relates to the stream expected at ``expected``.

    A chunk without ``pts`` always follows (its time is counted). Pure.
    """
    if expected is None:
        return Continuity.FIRST
    if pts is None or abs(pts - expected) <= GAP_TOLERANCE_S:
        return Continuity.FOLLOWS
    return Continuity.GAP if pts > expected else Continuity.REWIND


@dataclass(frozen=True, slots=True)
class _Anchor:
    sample: int  # recogniser samples fed before this chunk
    time: float  # stream seconds at this chunk's first sample


class StreamClock:
    """Recogniser time to stream time, one anchor per chunk. Not thread-safe.

    Anchors older than ``keep_s`` of recogniser time are forgotten, so an
    utterance longer than that gets its start clamped to the oldest anchor.
    """

    def __init__(self, keep_s: float = 120.0) -> None:
        self._anchors: deque[_Anchor] = deque()
        self._fed = 0  # recogniser samples fed since the last restart
        self._keep = int(keep_s * SAMPLE_RATE)
        self.expected: float | None = None  # stream time where the next chunk should start

    def add(self, time: float | None, recogniser_samples: int, duration: float) -> None:
        """Record a chunk of ``duration`` stream seconds starting at stream ``time``
        (None: right after the previous chunk), fed as ``recogniser_samples``."""
        start = time if time is not None else (self.expected or 0.0)
        self._anchors.append(_Anchor(self._fed, start))
        self._fed += recogniser_samples
        self.expected = start + duration
        while len(self._anchors) > 1 and self._anchors[1].sample < self._fed - self._keep:
            self._anchors.popleft()

    def to_stream(self, seconds: float) -> float:
        """Stream time of recogniser time ``seconds`` (clamped to the anchors held)."""
        sample = round(seconds * SAMPLE_RATE)
        anchor = self._anchors[0] if self._anchors else _Anchor(0, self.expected or 0.0)
        for candidate in self._anchors:
            if candidate.sample > sample:
                break
            anchor = candidate
        return anchor.time + max(0, sample - anchor.sample) / SAMPLE_RATE

    def forget_before(self, seconds: float) -> None:
        """Recogniser time before ``seconds`` will not be asked for again."""
        sample = round(seconds * SAMPLE_RATE)
        while len(self._anchors) > 1 and self._anchors[1].sample <= sample:
            self._anchors.popleft()

    def restart(self) -> None:
        """The recogniser's time restarted at 0 (flush or reset); stream time goes on."""
        self._anchors.clear()
        self._fed = 0
