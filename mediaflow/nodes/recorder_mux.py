"""The blocking half of the recorder: join segments into one clip file, mux audio in.

Video packets are copied (remuxed), never decoded or re-encoded: each segment's
packets are shifted by the segment's place in the clip (its ``pts`` minus the first
segment's, on the camera's clock). Audio is PCM laid out on the clip's wall-clock
timeline (silence where no chunk covers it) and encoded to AAC (MP4) or Opus (WebM),
starting at 0 like the video. Every function blocks: call them from a worker thread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import av.error
import numpy as np
from av.audio.stream import AudioStream
from av.video.stream import VideoStream

from mediaflow.live.opus import OPUS_RATES


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
    size: int  # bytes written


def container_for(media_type: str, seconds: float = 0.0) -> tuple[str, str, dict[str, str]]:
    """``(format, audio encoder, muxer options)`` for a segment media type, for a clip
    of ``seconds`` (0: unknown)."""
    if media_type == "video/webm":
        return "webm", "libopus", {}
    # A plain MP4 with the index up front: seekable in a browser from the first byte.
    # Room for the index is kept at the start, so it is written once, in place;
    # ``+faststart`` (when the length is unknown) writes the whole file a second time.
    if seconds > 0:
        return "mp4", "aac", {"moov_size": str(index_room(seconds))}
    return "mp4", "aac", {"movflags": "+faststart"}


# The index of an MP4 takes ~8 bytes a sample (seen: 13.9 kB for 1858 samples); room
# for three times that, at 60 pictures and 100 sound frames a second, and some more.
INDEX_BYTES_PER_SAMPLE = 24
SAMPLES_PER_S = 160
INDEX_BASE_BYTES = 16384


def index_room(seconds: float) -> int:
    """Bytes kept at the start of a clip of ``seconds`` for its index (``moov``)."""
    return INDEX_BASE_BYTES + math.ceil(seconds * SAMPLES_PER_S) * INDEX_BYTES_PER_SAMPLE


def mux_clip(
    segments: Sequence[SegmentFile],
    media_type: str,
    audio: ClipAudio | None,
    out: Path,
    *,
    copy_sound: bool = False,
) -> MuxedClip:
    """Write ``segments`` (same codec and size, in order) and ``audio`` to ``out``; with
    ``copy_sound`` (and no ``audio``), the sound the segments carry, copied. The index
    goes in room kept for it at the start; a clip whose index does not fit (FFmpeg
    refuses it as the file closes) is written again with ``+faststart``."""
    seconds = sum(segment.duration for segment in segments)
    try:
        return _mux(segments, media_type, audio, out, copy_sound, seconds)
    except av.error.ArgumentError:
        out.unlink(missing_ok=True)
        return _mux(segments, media_type, audio, out, copy_sound, 0.0)


def _mux(
    segments: Sequence[SegmentFile],
    media_type: str,
    audio: ClipAudio | None,
    out: Path,
    copy_sound: bool,
    seconds: float,
) -> MuxedClip:
    fmt, audio_encoder, options = container_for(media_type, seconds)
    with av.open(str(out), "w", format=fmt, options=options) as output:
        first = segments[0]
        sound_out: AudioStream | None = None
        with av.open(str(first.path)) as probe:
            template = probe.streams.video[0]
            video_out = output.add_stream_from_template(template)
            if template.codec_context.name == "hevc":
                video_out.codec_tag = "hvc1"  # what Apple's players and browsers look for
            video_codec = template.codec_context.name
            if copy_sound and audio is None and probe.streams.audio:
                sound_out = output.add_stream_from_template(probe.streams.audio[0])
        if audio is not None:
            sound_out = _audio_stream(output, audio_encoder, audio)
        frames = 0
        for segment in segments:
            frames += _copy_packets(
                segment, output, video_out, sound_out if audio is None else None
            )
        if audio is not None and sound_out is not None:
            _encode_audio(output, sound_out, audio)
    sound_codec = sound_out.codec_context.name if sound_out is not None else None
    return MuxedClip(video_codec, sound_codec, frames, out.stat().st_size)


def _copy_packets(
    segment: SegmentFile,
    output: av.container.OutputContainer,
    stream: VideoStream,
    sound: AudioStream | None = None,
) -> int:
    """Copy ``segment``'s video (and, into ``sound``, its sound) shifted to its place in
    the clip; the number of video packets."""
    count = 0
    with av.open(str(segment.path)) as source:
        targets: dict[int, VideoStream | AudioStream] = {source.streams.video[0].index: stream}
        if sound is not None and source.streams.audio:
            targets[source.streams.audio[0].index] = sound
        chosen = [s for s in source.streams if s.index in targets]
        for packet in source.demux(chosen):
            if packet.dts is None and packet.pts is None:
                continue  # the demuxer's flush packet
            time_base = packet.time_base
            assert time_base is not None
            shift = round(Fraction(segment.offset).limit_denominator(1_000_000) / time_base)
            if packet.pts is not None:
                packet.pts += shift
            if packet.dts is not None:
                packet.dts += shift
            target = targets[packet.stream.index]
            packet.stream = target
            output.mux(packet)
            count += target is stream
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
