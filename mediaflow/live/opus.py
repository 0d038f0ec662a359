"""Opus for WebRTC viewers: a microphone's sound encoded once, in packets every viewer
shares. PyAV (libopus) does the encoding; the rest is pure.

:class:`OpusEncoder` takes s16 PCM at the microphone's own rate and channels where
Opus takes them (:data:`OPUS_RATES`, mono or stereo), at a constant bitrate, so that
a chunk's 20 ms packets are one size: :func:`sound_runs` groups them into one
:class:`~mediaflow.live.rtp.RtpFrame`, which a viewer's sender sends in one system
call (:mod:`mediaflow.live.rtp_wire`). Packets are timed on RTP's 48 kHz clock
whatever the rate encoded (RFC 7587 §4.1).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import av
import numpy as np

from mediaflow.live.audio import LAYOUTS, Pcm
from mediaflow.live.rtp import RtpFrame

OPUS_BITS_PER_CHANNEL = 32000
OPUS_RATES = frozenset({8000, 12000, 16000, 24000, 48000})  # what libopus takes as it is
OPUS_COMPLEXITY = 5
OPUS_CLOCK_HZ = 48000  # RTP's Opus clock, whatever the rate encoded (RFC 7587 §4.1)
OPUS_PACKET_TICKS = OPUS_CLOCK_HZ // 50  # 20 ms: libopus's default frame


class OpusEncoder:
    """s16 PCM at any rate in, 20 ms Opus packets out, timed on RTP's 48 kHz clock.
    Blocking: run it on a thread. A change of rate or channels starts a new encoder,
    whose packets go on from the last one's time (a viewer's RTP clock never steps
    back).

    The encoder takes the sound as it comes where Opus can (its rates, mono or
    stereo): WebRTC's ``opus/48000/2`` names RTP's clock and what a decoder can
    output, and a decoder plays a mono stream at any rate it was given. Resampling
    a 16 kHz microphone to 48 kHz stereo first cost more than encoding it."""

    def __init__(self) -> None:
        self._context: Any = None
        self._sound: tuple[int, int] | None = None
        self._samples = 0  # taken by the current encoder, at its input rate
        self._base = 0  # the current encoder's first pts, at 48 kHz
        self._ticks = 1  # RTP ticks (48 kHz) per sample of the encoder's rate

    def encode(self, pcm: Pcm, rate: int, channels: int) -> list[tuple[int, bytes]]:
        """``pcm`` shaped ``(frames, channels)``; the (pts at 48 kHz, packet) pairs done.
        Raises ``ValueError`` for sound Opus cannot carry as it is (over two channels)."""
        if self._sound != (rate, channels):
            self._open(rate, channels)
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1),
            format="s16",
            layout=LAYOUTS[channels],
        )
        frame.sample_rate = rate
        frame.pts, frame.time_base = self._samples, Fraction(1, rate)
        self._samples += int(pcm.shape[0])
        return [
            (self._base + int(p.pts) * self._ticks, bytes(p))
            for p in self._context.encode(frame)
            if p.pts is not None
        ]

    def _open(self, rate: int, channels: int) -> None:
        if channels not in LAYOUTS:
            raise ValueError(f"live sound is mono or stereo; got {channels} channels")
        if self._sound is not None:
            self._base += round(self._samples * OPUS_CLOCK_HZ / self._sound[0]) + OPUS_PACKET_TICKS
        encoded_at = rate if rate in OPUS_RATES else OPUS_CLOCK_HZ  # else PyAV resamples
        context = av.CodecContext.create("libopus", "w")
        context.sample_rate = encoded_at
        context.layout = LAYOUTS[channels]
        context.format = "s16"
        context.bit_rate = OPUS_BITS_PER_CHANNEL * channels
        context.time_base = Fraction(1, encoded_at)
        # Constant bitrate: a chunk's packets are one size, so a viewer's sender
        # sends them in one system call (rtp_wire). Complexity 5 of 10 halves the
        # encoder's time for a difference a live listener does not hear.
        context.options = {"vbr": "off", "compression_level": str(OPUS_COMPLEXITY)}
        context.open()
        self._context, self._sound, self._samples = context, (rate, channels), 0
        self._ticks = OPUS_CLOCK_HZ // encoded_at


def sound_runs(packets: list[tuple[int, bytes]]) -> list[RtpFrame]:
    """Opus ``(pts, packet)`` pairs as runs of packets that follow one another
    without a gap (one :class:`RtpFrame` each, sent in one go). Pure."""
    runs: list[RtpFrame] = []
    start = 0
    for end in range(1, len(packets) + 1):
        if end == len(packets) or packets[end][0] != packets[end - 1][0] + OPUS_PACKET_TICKS:
            payloads = tuple(data for _, data in packets[start:end])
            runs.append(RtpFrame(payloads, packets[start][0], True, OPUS_PACKET_TICKS))
            start = end
    return runs
