"""Sound a segment cannot carry as it is, encoded to AAC once (blocking).

IP cameras often send G.711 (mu-law or A-law, 8 kHz); MP4 and browsers take AAC.
:class:`SoundToAac` decodes the camera's packets, resamples where AAC has no such
rate, and encodes AAC frames timed sample by sample from the first packet, so they
line up with the pictures by the camera's own clock.
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from devices import CapturedPacket, StreamTemplates
from mediaflow.live.audio import AAC_RATES, AacEncoder
from mediaflow.live.fmp4 import AudioTrack
from mediaflow.live.parts import AAC_FRAME_SAMPLES


class SoundToAac:
    """Sound a segment cannot carry as it is (G.711 ...), decoded and encoded to AAC
    once. Blocking. Frames are timed from the first packet's time, sample by sample."""

    def __init__(self, templates: StreamTemplates) -> None:
        decoder = av.CodecContext.create(templates.audio_codec or "", "r")
        assert isinstance(decoder, av.AudioCodecContext)
        decoder.sample_rate = templates.audio_rate
        decoder.layout = "stereo" if templates.audio_channels == 2 else "mono"
        if templates.audio_extradata:
            decoder.extradata = templates.audio_extradata
        self._decoder = decoder
        self.rate = templates.audio_rate if templates.audio_rate in AAC_RATES else 48000
        self.channels = 2 if templates.audio_channels >= 2 else 1
        layout = "stereo" if self.channels == 2 else "mono"
        self._resampler = av.AudioResampler(format="s16", layout=layout, rate=self.rate)
        self._encoder = AacEncoder(self.rate, self.channels)
        self._origin: tuple[float, float] | None = None  # (input time, capture time) of sample 0

    @property
    def track(self) -> AudioTrack:
        return self._encoder.track

    def push(self, packet: CapturedPacket) -> list[CapturedPacket]:
        """The AAC frames done, as packets on the input's clock (raises FFmpeg's error
        for a packet it cannot decode)."""
        if self._origin is None:
            self._origin = (packet.pts_s, packet.captured_at)
        frames = self._decoder.decode(av.Packet(packet.data))
        pcm = [ready.to_ndarray() for frame in frames for ready in self._resampler.resample(frame)]
        if not pcm:
            return []
        samples = np.concatenate(pcm, axis=1).astype(np.int16).reshape(-1, self.channels)
        return self._timed(self._encoder.encode(samples))

    def finish(self) -> list[CapturedPacket]:
        """The frames the encoder still holds (the stream ended, or a gap follows); it
        takes nothing after this."""
        tail = [ready.to_ndarray() for ready in self._resampler.resample(None)]
        samples = np.concatenate(tail, axis=1).astype(np.int16) if tail else np.zeros((1, 0))
        done = self._encoder.encode(samples.astype(np.int16).reshape(-1, self.channels))
        return self._timed(done + self._encoder.finish())

    def _timed(self, encoded: list[tuple[int, bytes]]) -> list[CapturedPacket]:
        """Encoded frames as packets: sample ``first`` plays ``first / rate`` after the
        first packet the transcoder took (the encoder's priming frame, before it, is
        left out)."""
        if self._origin is None:
            return []
        start_s, captured = self._origin
        base, step = Fraction(1, self.rate), AAC_FRAME_SAMPLES / self.rate
        out = []
        for first, data in encoded:
            if first >= 0:
                at = first / self.rate
                out.append(
                    CapturedPacket(
                        media="audio",
                        data=data,
                        pts=first,
                        dts=first,
                        time_base=base,
                        pts_s=start_s + at,
                        dts_s=start_s + at,
                        duration_s=step,
                        keyframe=True,
                        captured_at=captured + at,
                    )
                )
        return out
