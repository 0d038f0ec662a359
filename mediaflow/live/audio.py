"""A microphone's sound as AAC frames on the capture clock, for live streams.

Sound is cut into 1024-sample slots counted from the stream's first sample, so every
AAC frame starts on that grid whatever chunk sizes the microphone delivers. While a
live stream is watched the slots are encoded (:class:`AacEncoder`, FFmpeg's native
AAC through PyAV); while nobody watches, each slot is the encoder's own silent frame
(four bytes, the same every time), so the stream keeps a continuous audio track at no
encoding cost and a player that arrives hears sound from its next slot.
:class:`SampleClock` turns a slot's first sample into its capture time from the
chunks' ``captured_at``, so sound lines up with the picture as both were captured.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
import numpy.typing as npt

from mediaflow.live.fmp4 import AudioTrack
from mediaflow.live.parts import AAC_FRAME_SAMPLES

# Sampling rates AAC signals by index (ISO 14496-3); others are resampled to 48 kHz.
AAC_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000)
BITS_PER_CHANNEL = {8000: 24000, 11025: 24000, 12000: 24000, 16000: 32000}
DEFAULT_BITS_PER_CHANNEL = 64000
LAYOUTS = {1: "mono", 2: "stereo"}

Pcm = npt.NDArray[np.int16]


def check_sound(rate: int, channels: int) -> None:
    """``ValueError`` unless a live stream can carry this sound as AAC as it is."""
    if rate not in AAC_RATES:
        rates = ", ".join(map(str, AAC_RATES))
        raise ValueError(f"live sound needs one of AAC's rates ({rates}); got {rate}")
    if channels not in LAYOUTS:
        raise ValueError(f"live sound is mono or stereo; got {channels} channels")


class AacEncoder:
    """Raw AAC-LC frames from s16 PCM, one stream at a time. Blocking: run it in a thread.

    ``encode`` takes samples continuing from the last call and returns the frames that
    are complete, each with the stream sample its sound starts at. The first frame of
    a new encoder is its priming frame, one slot before the first sample it was given.
    """

    def __init__(self, rate: int, channels: int, first_sample: int = 0) -> None:
        check_sound(rate, channels)
        context = av.CodecContext.create("aac", "w")
        assert isinstance(context, av.AudioCodecContext)
        context.sample_rate = rate
        context.layout = LAYOUTS[channels]
        context.format = "fltp"
        context.time_base = Fraction(1, rate)
        context.bit_rate = channels * BITS_PER_CHANNEL.get(rate, DEFAULT_BITS_PER_CHANNEL)
        context.open()
        self.rate, self.channels = rate, channels
        self.asc = bytes(context.extradata or b"")
        self._context = context
        self._next_pts = first_sample
        self._pending = np.zeros((channels, 0), dtype=np.float32)

    @property
    def track(self) -> AudioTrack:
        return AudioTrack(self.rate, self.channels, self.asc)

    def encode(self, pcm: Pcm) -> list[tuple[int, bytes]]:
        """``pcm`` shaped ``(frames, channels)``; the (first sample, frame) pairs done."""
        planar = (pcm.T.astype(np.float32) / 32768.0).reshape(self.channels, -1)
        buffered = np.concatenate([self._pending, planar], axis=1)
        whole = buffered.shape[1] - buffered.shape[1] % AAC_FRAME_SAMPLES
        self._pending = buffered[:, whole:]
        done: list[tuple[int, bytes]] = []
        for start in range(0, whole, AAC_FRAME_SAMPLES):
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(buffered[:, start : start + AAC_FRAME_SAMPLES]),
                format="fltp",
                layout=LAYOUTS[self.channels],
            )
            frame.sample_rate = self.rate
            frame.pts, frame.time_base = self._next_pts, Fraction(1, self.rate)
            self._next_pts += AAC_FRAME_SAMPLES
            done.extend(self._packets(frame))
        return done

    def finish(self) -> list[tuple[int, bytes]]:
        """The frames still held: the last samples padded with silence to a whole frame,
        and what the encoder delays. The encoder takes nothing after this."""
        missing = -self._pending.shape[1] % AAC_FRAME_SAMPLES
        done = []
        if self._pending.shape[1]:
            padding = np.zeros((self.channels, missing), dtype=np.float32)
            done = self.encode(np.zeros((0, self.channels), dtype=np.int16))
            self._pending = np.concatenate([self._pending, padding], axis=1)
            done += self.encode(np.zeros((0, self.channels), dtype=np.int16))
        return done + self._packets(None)

    def _packets(self, frame: av.AudioFrame | None) -> list[tuple[int, bytes]]:
        return [
            (packet.pts, bytes(packet))
            for packet in self._context.encode(frame)
            if packet.pts is not None
        ]


class AacDecoder:
    """One AAC track's raw frames (``track.asc`` configures it) to s16 PCM shaped
    ``(frames, channels)``: a copied camera's own sound, for WebRTC's Opus. Blocking:
    run it in a thread. Raises ``ValueError`` for a track that is not mono or stereo."""

    def __init__(self, track: AudioTrack) -> None:
        if track.channels not in LAYOUTS:
            raise ValueError(f"live sound is mono or stereo; got {track.channels} channels")
        context = av.CodecContext.create("aac", "r")
        assert isinstance(context, av.AudioCodecContext)
        context.extradata = track.asc
        self.track = track
        self._context = context
        layout = LAYOUTS[track.channels]
        self._to_s16 = av.AudioResampler(format="s16", layout=layout, rate=track.sample_rate)

    def decode(self, data: bytes) -> Pcm:
        """The PCM of one raw AAC frame (none while the decoder primes). Raises
        ``av.FFmpegError`` for a frame FFmpeg cannot decode."""
        channels = self.track.channels
        pcm = [
            converted.to_ndarray().reshape(-1, channels)
            for frame in self._context.decode(av.Packet(data))
            for converted in self._to_s16.resample(frame)
        ]
        return np.concatenate(pcm) if pcm else np.zeros((0, channels), dtype=np.int16)


_SILENCE: dict[tuple[int, int], tuple[AudioTrack, bytes]] = {}


def silent_stream(rate: int, channels: int) -> tuple[AudioTrack, bytes]:
    """The track an encoder of this sound describes, and its frame for a silent slot
    (the same bytes every time once the encoder has settled). Cached per sound."""
    key = (rate, channels)
    if key not in _SILENCE:
        encoder = AacEncoder(rate, channels)
        frames = encoder.encode(np.zeros((AAC_FRAME_SAMPLES * 4, channels), dtype=np.int16))
        _SILENCE[key] = (encoder.track, frames[-1][1])
    return _SILENCE[key]


@dataclass(frozen=True, slots=True)
class _Anchor:
    sample: int
    captured_at: float


class SampleClock:
    """Stream samples to capture times, from the chunks that carried them. Pure.

    Each chunk anchors its first sample at its ``captured_at``; a sample is timed from
    the newest anchor at or before it, so a device's clock drifting against the wall
    clock is followed chunk by chunk. The newest ``keep`` anchors are kept: enough
    for frames the encoder hands back a little later.
    """

    def __init__(self, rate: int, keep: int = 64) -> None:
        self.rate = rate
        self.samples = 0  # samples taken so far: where the next chunk starts
        self._anchors: deque[_Anchor] = deque(maxlen=keep)

    def take(self, frames: int, captured_at: float) -> int:
        """Count a chunk of ``frames`` samples captured at ``captured_at``; its first sample."""
        first = self.samples
        self._anchors.append(_Anchor(first, captured_at))
        self.samples += frames
        return first

    def time_of(self, sample: int) -> float:
        """The capture time of stream sample ``sample`` (before any anchor: extrapolated)."""
        if not self._anchors:
            raise ValueError("no chunk taken yet")
        anchor = self._anchors[0]
        for candidate in self._anchors:
            if candidate.sample > sample:
                break
            anchor = candidate
        return anchor.captured_at + (sample - anchor.sample) / self.rate
