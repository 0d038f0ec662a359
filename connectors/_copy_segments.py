"""Segments of what a camera encoded: its packets cut at keyframes, never re-encoded.

The ``video`` port of a source whose video is H.264 or H.265 (see
:mod:`devices.codecs`) carries the source's own packets. :class:`PacketSegmenter`
puts them, with the source's sound, into self-contained fragmented MP4 segments:

- a segment starts at a keyframe and closes at the first keyframe ``segment_s`` (less
  a quarter frame) or more after its start, so ``segment_s`` is a target: a camera
  whose keyframes are further apart than that gets segments one group of pictures
  long. It also closes where the input changes (an epoch: a reconnect, a gap) and on
  :meth:`~PacketSegmenter.flush`;
- video and sound are put in one time order first (:class:`Interleaver`), so the
  sound that plays before a keyframe is in the segment that keyframe ends;
- AAC is copied; other sound (G.711 mu-law or A-law, as IP cameras send) is decoded
  and encoded to AAC once (:class:`SoundToAac`);
- timestamps count from the segment's first keyframe (presentation time 0); the
  segment's place in the source is its meta's ``pts``, as for encoded segments.

The live view reads the same packets (``feed``): H.264 as Annex B with the stream's
parameter sets, the sound as AAC frames, both on the capture clock. Runs on an
encoding lane's thread (:mod:`connectors._lanes`): every method blocks briefly.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from fractions import Fraction

import av
from av.container import OutputContainer
from av.stream import Stream

from connectors._copy_jobs import Interleaver, PacketJob
from connectors._copy_sound import SoundToAac
from connectors._segments import EncodedSegment
from connectors._timeline import Epoch
from devices import CapturedPacket, StreamTemplates
from devices.codecs import COPY_VIDEO
from mediaflow.live.fmp4 import AudioTrack
from mediaflow.live.h264 import (
    BitstreamError,
    avcc_config_to_annexb,
    avcc_sample,
    is_annexb,
    parameter_sets,
    to_avcc,
)
from mediaflow.live.hub import LiveFeed
from mediaflow.live.parts import AudioFrame, VideoFrame

log = logging.getLogger(__name__)

FRAGMENTED = {"movflags": "frag_keyframe+empty_moov+default_base_moof"}
DEFAULT_FRAME_S = 1 / 30


@dataclass
class _SoundOut:
    """How the open segment writes sound: copied from the source, or encoded to AAC."""

    stream: Stream
    time_base: Fraction


class _CopiedSegment:
    """One segment being written: the keyframe it starts at, its muxer, its counts."""

    def __init__(self, job: PacketJob, sound: AudioTrack | None, copy_sound: bool) -> None:
        first = job.packet
        templates = job.templates
        self.templates = templates
        self.epoch = job.epoch
        self.start_s = first.pts_s  # the input's time of presentation 0
        self._start_ticks = first.pts  # the same, in the video's time base
        self.pts = job.pts
        self.captured_at = first.captured_at
        self.frames = 0
        self.last_s = first.pts_s
        self.last_duration_s = first.duration_s
        self._buffer = io.BytesIO()
        self._container: OutputContainer = av.open(
            self._buffer, "w", format="mp4", options=FRAGMENTED
        )
        self._video = self._container.add_stream_from_template(templates.video)
        self._video.time_base = first.time_base
        if templates.video_codec == "hevc":
            self._video.codec_tag = "hvc1"  # what Apple's players and browsers look for
        self._sound: _SoundOut | None = None
        if copy_sound and templates.audio is not None:
            stream = self._container.add_stream_from_template(templates.audio)
            stream.time_base = Fraction(1, templates.audio_rate or 48000)
            self._sound = _SoundOut(stream, stream.time_base)
        elif sound is not None:
            layout = "stereo" if sound.channels == 2 else "mono"
            stream = self._container.add_stream("aac", rate=sound.sample_rate, layout=layout)
            self._sound = _SoundOut(stream, Fraction(1, sound.sample_rate))
        self.audio_codec = "aac" if self._sound is not None else None

    def add_video(self, packet: CapturedPacket) -> None:
        base = packet.time_base
        out = av.Packet(packet.data)
        out.pts = packet.pts - self._start_ticks
        out.dts = packet.dts - self._start_ticks
        out.time_base = base
        out.duration = round(Fraction(packet.duration_s).limit_denominator(10**9) / base)
        out.is_keyframe = packet.keyframe
        out.stream = self._video
        self._container.mux(out)
        self.frames += 1
        if packet.pts_s >= self.last_s:
            self.last_s, self.last_duration_s = packet.pts_s, packet.duration_s

    def add_sound(self, data: bytes, time_s: float, duration_s: float) -> None:
        """One AAC frame playing from ``time_s`` (the input's clock)."""
        if self._sound is None or time_s < self.start_s:
            return  # sound from before the keyframe: nothing in this segment plays it
        base = self._sound.time_base
        out = av.Packet(data)
        out.pts = out.dts = round(Fraction(time_s - self.start_s).limit_denominator(10**9) / base)
        out.time_base = base
        out.duration = max(1, round(Fraction(duration_s).limit_denominator(10**9) / base))
        out.stream = self._sound.stream
        self._container.mux(out)

    def close(self, end_s: float | None) -> EncodedSegment:
        """Finish the file. ``end_s``: the next keyframe's time, None when unknown (the
        last frame then lasts as long as its own duration says, or one frame)."""
        self._container.close()
        if end_s is None:
            end_s = self.last_s + (self.last_duration_s or self._frame_s())
        templates = self.templates
        return EncodedSegment(
            data=self._buffer.getvalue(),
            media_type="video/mp4",
            epoch=self.epoch,
            pts=self.pts,
            duration=end_s - self.start_s,
            captured_at=self.captured_at,
            width=templates.width,
            height=templates.height,
            codec=COPY_VIDEO[templates.video_codec],
            fps=templates.fps or 1 / self._frame_s(),
            frames=self.frames,
            audio_codec=self.audio_codec,
            copied=True,
        )

    def _frame_s(self) -> float:
        return 1 / self.templates.fps if self.templates.fps else DEFAULT_FRAME_S


class PacketSegmenter:
    """Cuts copied packets into segments (the lane work of a copying ``video`` port).

    ``feed``: the live view of this camera, fed H.264 frames and, when ``live_sound``,
    the camera's own sound. ``sound``: whether segments carry the source's sound.
    """

    def __init__(
        self,
        segment_s: float,
        *,
        sound: bool = True,
        feed: LiveFeed | None = None,
        live_sound: bool = False,
    ) -> None:
        self.segment_s = segment_s
        self.sound = sound
        self.feed = feed
        self.live_sound = live_sound
        self.dropped = 0  # packets before a keyframe, or sound that could not be encoded
        self._open: _CopiedSegment | None = None
        self._epoch: Epoch | None = None
        self._templates: StreamTemplates | None = None
        self._interleaver = Interleaver(False)
        self._transcoder: SoundToAac | None = None
        self._transcode = False  # sound is encoded to AAC (by a transcoder made when needed)
        self._sound_track: AudioTrack | None = None  # the sound segments and live carry
        self._copy_sound = False
        self._parameter_sets = b""
        self._length_size = 0  # 0: Annex B packets; else AVCC with this NAL length size

    def push(self, job: PacketJob) -> list[EncodedSegment]:
        """Take one packet; the segments it completed."""
        done: list[EncodedSegment] = []
        if self._epoch is None or job.epoch.index != self._epoch.index:
            done += self.flush()
            self._begin(job)
        for ready in self._as_copied(job):
            for due in self._interleaver.push(ready):
                done += self._place(due)
        return done

    def _as_copied(self, job: PacketJob) -> list[PacketJob]:
        """``job`` as the segment carries it: sound that is not AAC encoded to AAC first,
        so that the frames are ordered and cut by their own times."""
        if job.packet.media == "video" or self._copy_sound:
            return [job]
        transcoder = self._transcoder_for(job.templates)
        if transcoder is None:
            return []
        try:
            encoded = transcoder.push(job.packet)
        except av.FFmpegError:
            self.dropped += 1  # a torn sound packet: its samples are left out
            return []
        return [PacketJob(p, job.pts, job.epoch, job.templates) for p in encoded]

    def _transcoder_for(self, templates: StreamTemplates) -> SoundToAac | None:
        if self._transcoder is None and self._transcode:
            try:
                self._transcoder = SoundToAac(templates)
            except (av.FFmpegError, ValueError) as exc:
                log.warning("sound of %s cannot be encoded to AAC: %s", templates.video, exc)
                self._transcode = False
        return self._transcoder

    def flush(self) -> list[EncodedSegment]:
        """Close the open segment (the stream ended, or a gap)."""
        done: list[EncodedSegment] = []
        transcoder, self._transcoder = self._transcoder, None
        if transcoder is not None and self._epoch is not None and self._templates is not None:
            for tail in transcoder.finish():
                job = PacketJob(tail, tail.pts_s, self._epoch, self._templates)
                for due in self._interleaver.push(job):
                    done += self._place(due)
        for due in self._interleaver.flush():
            done += self._place(due)
        current, self._open = self._open, None
        if current is not None:
            done.append(current.close(None))
        return done

    def _begin(self, job: PacketJob) -> None:
        """A new input (or the first): its streams decide how sound and live work."""
        self._epoch = job.epoch
        templates = job.templates
        if templates is self._templates:
            return
        self._templates = templates
        has_sound = self.sound and templates.audio_codec is not None
        self._interleaver = Interleaver(has_sound)
        # AAC without its configuration (ADTS, as some streams send it) is re-encoded.
        self._copy_sound = has_sound and templates.audio is not None
        self._copy_sound = self._copy_sound and bool(templates.audio_extradata)
        self._transcode = has_sound and not self._copy_sound
        self._sound_track = self._source_track() if self._copy_sound else None
        transcoder = self._transcoder_for(templates)
        if transcoder is not None:
            self._sound_track = transcoder.track
        self._live_params(templates)

    def _live_params(self, templates: StreamTemplates) -> None:
        extradata = templates.video_extradata
        self._length_size = 0
        self._parameter_sets = b""
        if templates.video_codec != "h264" or not extradata:
            return
        if is_annexb(extradata):
            self._parameter_sets = extradata
            return
        try:
            self._parameter_sets, self._length_size = avcc_config_to_annexb(extradata)
        except BitstreamError:
            log.warning("the H.264 configuration of %s cannot be read", templates.video)

    def _place(self, job: PacketJob) -> list[EncodedSegment]:
        if job.packet.media == "video":
            return self._place_video(job)
        self._place_sound(job.packet)
        return []

    def _place_video(self, job: PacketJob) -> list[EncodedSegment]:
        packet = job.packet
        done: list[EncodedSegment] = []
        current = self._open
        if packet.keyframe and (current is None or self._long_enough(current, packet)):
            if current is not None:
                done.append(current.close(packet.pts_s))
            sound = None if self._copy_sound else self._sound_track
            current = self._open = _CopiedSegment(job, sound, self._copy_sound)
        if current is None:
            self.dropped += 1  # nothing decodes before the first keyframe
            return done
        current.add_video(packet)
        self._tap_video(packet)
        return done

    def _long_enough(self, current: _CopiedSegment, keyframe: CapturedPacket) -> bool:
        # A quarter frame short still counts: keyframe times jitter around the target.
        quarter = 0.25 / (current.templates.fps or 1 / DEFAULT_FRAME_S)
        return keyframe.pts_s - current.start_s >= self.segment_s - quarter

    def _place_sound(self, packet: CapturedPacket) -> None:
        if self._open is not None:
            self._open.add_sound(packet.data, packet.pts_s, packet.duration_s)
        if self.feed is not None and self.live_sound and self._sound_track is not None:
            self.feed.tap_sound(self._sound_track, AudioFrame(packet.data, packet.captured_at))

    def _source_track(self) -> AudioTrack | None:
        templates = self._templates
        if templates is None or not templates.audio_extradata:
            return None
        channels = 2 if templates.audio_channels >= 2 else 1
        return AudioTrack(templates.audio_rate, channels, templates.audio_extradata)

    def _tap_video(self, packet: CapturedPacket) -> None:
        if self.feed is None or self._templates is None or self._templates.video_codec != "h264":
            return
        # The sample is made here, on the lane's thread, not by the feed on the event loop.
        data = packet.data
        try:
            if self._length_size:  # an MP4's packets: its parameter sets are in avcC
                annexb, sample = b"", avcc_sample(data, self._length_size)
            else:
                annexb, sample = data, to_avcc(data)
                if not self._parameter_sets and packet.keyframe:
                    sps, pps = parameter_sets(data)  # a camera that sends them only in-band
                    self._parameter_sets = b"".join(b"\x00\x00\x00\x01" + n for n in sps + pps)
        except BitstreamError:
            return
        offset = packet.pts_s - packet.dts_s
        at = packet.captured_at - offset
        frame = VideoFrame(annexb, at, packet.keyframe, offset, sample=sample)
        self.feed.tap(self._parameter_sets, frame)
