"""The blocking half of the recorder: join segments into one clip file, mux audio in.

Video packets are copied (remuxed), never decoded or re-encoded: each segment's
packets are shifted by the segment's place in the clip (its ``pts`` minus the first
segment's, on the camera's clock). Audio is PCM laid out on the clip's wall-clock
timeline (silence where no chunk covers it) and encoded to AAC (MP4) or Opus (WebM),
starting at 0 like the video. Every function blocks: call them from a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from av.audio.stream import AudioStream
from av.video.stream import VideoStream

# Sample rates libopus encodes natively; anything else is resampled to 48 kHz.
OPUS_RATES = frozenset({8000, 12000, 16000, 24000, 48000})


@dataclass(frozen=True)
class SegmentFile:
    """One camera segment as the clip needs it."""

    path: Path
    offset: float  # seconds from the clip's start (camera clock)
    duration: float


@dataclass(frozen=True)
class ClipAudio:
    """The clip's audio track: int16 PCM, ``samples[frames, channels]``."""

    samples: np.ndarray
    rate: int


@dataclass(frozen=True)
class MuxedClip:
    """What :func:`mux_clip` wrote."""

    video_codec: str
    audio_codec: str | None
    frames: int


def container_for(media_type: str) -> tuple[str, str, dict[str, str]]:
    """``(format, audio encoder, muxer options)`` for a segment media type."""
    if media_type == "video/webm":
        return "webm", "libopus", {}
    # A plain MP4 with the index up front: seekable in a browser from the first byte.
    return "mp4", "aac", {"movflags": "+faststart"}


def mux_clip(
    segments: Sequence[SegmentFile], media_type: str, audio: ClipAudio | None, out: Path
) -> MuxedClip:
    """Write ``segments`` (same codec and size, in order) and ``audio`` to ``out``."""
    fmt, audio_encoder, options = container_for(media_type)
    with av.open(str(out), "w", format=fmt, options=options) as output:
        first = segments[0]
        with av.open(str(first.path)) as probe:
            template = probe.streams.video[0]
            video_out = output.add_stream_from_template(template)
            video_codec = template.codec_context.name
        audio_out = _audio_stream(output, audio_encoder, audio) if audio is not None else None
        frames = 0
        for segment in segments:
            frames += _copy_packets(segment, output, video_out)
        if audio is not None and audio_out is not None:
            _encode_audio(output, audio_out, audio)
    return MuxedClip(
        video_codec, audio_out.codec_context.name if audio_out is not None else None, frames
    )


def _copy_packets(
    segment: SegmentFile, output: av.container.OutputContainer, stream: VideoStream
) -> int:
    count = 0
    with av.open(str(segment.path)) as source:
        source_stream = source.streams.video[0]
        time_base = source_stream.time_base
        assert time_base is not None
        shift = round(Fraction(segment.offset).limit_denominator(1_000_000) / time_base)
        for packet in source.demux(source_stream):
            if packet.dts is None and packet.pts is None:
                continue  # the demuxer's flush packet
            if packet.pts is not None:
                packet.pts += shift
            if packet.dts is not None:
                packet.dts += shift
            packet.stream = stream
            output.mux(packet)
            count += 1
    return count


def _audio_stream(
    output: av.container.OutputContainer, encoder: str, audio: ClipAudio
) -> AudioStream:
    rate = audio.rate
    if encoder == "libopus" and rate not in OPUS_RATES:
        rate = 48000
    layout = "mono" if audio.samples.shape[1] == 1 else "stereo"
    stream = output.add_stream(encoder, rate=rate, layout=layout)
    assert isinstance(stream, AudioStream)
    if encoder == "aac":
        stream.codec_context.bit_rate = 64000 * audio.samples.shape[1]
    return stream


def _encode_audio(
    output: av.container.OutputContainer, stream: AudioStream, audio: ClipAudio
) -> None:
    context = stream.codec_context
    channels = min(audio.samples.shape[1], 2)
    pcm = np.ascontiguousarray(audio.samples[:, :channels])
    layout = "mono" if channels == 1 else "stereo"
    resampler = av.AudioResampler(format=context.format, layout=layout, rate=context.rate)
    block = 1024 * max(1, audio.rate // 8000)
    for start in range(0, len(pcm), block):
        chunk = pcm[start : start + block]
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout=layout)
        frame.sample_rate = audio.rate
        frame.pts = start
        frame.time_base = Fraction(1, audio.rate)
        for ready in resampler.resample(frame):
            output.mux(stream.encode(ready))
    for ready in resampler.resample(None):
        output.mux(stream.encode(ready))
    output.mux(stream.encode(None))
