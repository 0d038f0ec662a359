"""The packet copying of an export (:mod:`mediaflow.timeline.export`): blocking, PyAV.

Each piece of a plan (:mod:`mediaflow.timeline.cut`) is demuxed from its clip and
its packets are muxed shifted by the piece's offset: output time = clip time +
``piece.shift``. The first piece starts at the keyframe at or before its cut (times
before 0 become the edit list); later pieces start at their first keyframe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import av
from av.audio.stream import AudioStream
from av.container import InputContainer, OutputContainer
from av.video.stream import VideoStream

if TYPE_CHECKING:
    from av.packet import Packet as AnyPacket

    Packet = AnyPacket[Any]

from mediaflow.timeline.cut import CannotExport, ClipFile, Piece, iso

# The sound packet before the cut is copied too: an AAC decoder needs one packet to
# warm up (its first output is overlap-added with the previous frame); the edit list
# hides it.
AUDIO_WARMUP_PACKETS = 1
EPSILON_S = 1e-6


@dataclass
class CopyState:
    """The output's streams and what has been written to them so far."""

    video_stream: VideoStream
    audio_stream: AudioStream | None
    video_shape: tuple[str, int, int]
    audio_shape: tuple[str, int, int] | None
    first_keyframe: float | None = None  # wall clock
    # How far after the cut the first frame shown is (< 1 frame): output time 0 is put
    # on that frame, not between two, or FFmpeg's demuxer moves the picture (only) to
    # 0 and it runs up to a frame ahead of the sound.
    lead: Fraction = Fraction(0)
    video_packets: int = 0
    audio_packets: int = 0
    last_video_dts: Fraction | None = None  # output seconds
    audio_end: Fraction | None = None  # output seconds where the sound written ends


def open_streams(output: OutputContainer, sources: Sequence[ClipFile]) -> CopyState:
    """Add a video stream like the first clip's, and a sound stream like the first
    clip with sound (if any); every clip must match them (:func:`copy_piece` checks)."""
    with av.open(str(sources[0].path)) as first:
        template = first.streams.video[0]
        video = output.add_stream_from_template(template)
        if template.codec_context.name == "hevc":
            video.codec_tag = "hvc1"  # what Apple's players and browsers look for
        shape = _video_shape(first)
    audio: AudioStream | None = None
    audio_shape = None
    for source in sources:
        if source.clip.ref.meta.get("audio_codec") is None:
            continue
        with av.open(str(source.path)) as clip:
            if clip.streams.audio:
                audio = output.add_stream_from_template(clip.streams.audio[0])
                audio_shape = _audio_shape(clip)
                break
    return CopyState(video, audio, shape, audio_shape)


def _video_shape(container: InputContainer) -> tuple[str, int, int]:
    context = container.streams.video[0].codec_context
    return (context.name, context.width, context.height)


def _audio_shape(container: InputContainer) -> tuple[str, int, int] | None:
    if not container.streams.audio:
        return None
    context = container.streams.audio[0].codec_context
    return (context.name, context.sample_rate, context.channels)


def copy_piece(output: OutputContainer, state: CopyState, piece: Piece) -> None:
    """Copy ``piece``'s packets into ``output``. Raises :class:`CannotExport` when its
    clip's tracks do not match the output's."""
    clip = piece.source.clip
    with av.open(str(piece.source.path)) as source:
        if not source.streams.video:
            raise CannotExport(f"the clip at {iso(clip.start)} has no video track")
        shape, sound = _video_shape(source), _audio_shape(source)
        if shape != state.video_shape or (sound is not None and sound != state.audio_shape):
            raise CannotExport(
                f"the clip at {iso(clip.start)} is {shape}/{sound}, unlike the range's"
                f" first {state.video_shape}/{state.audio_shape}: export around it"
            )
        video = source.streams.video[0]
        audio = source.streams.audio[0] if sound is not None else None
        if piece.first:
            _seek(source, video, piece.local_in)
            state.lead = _first_shown(source, video, Fraction(piece.local_in)) - Fraction(
                piece.local_in
            )
            _seek(source, video, piece.local_in)
        _Copier(output, state, piece, audio is not None).run(source, video, audio)


def _seek(source: InputContainer, video: VideoStream, local: float) -> None:
    """To the keyframe at or before ``local`` seconds (the mov demuxer seeks every
    stream to its sample at or before that time)."""
    if video.time_base is not None:
        source.seek(round(local / video.time_base), stream=video, backward=True)


def _first_shown(source: InputContainer, video: VideoStream, local_in: Fraction) -> Fraction:
    """The time of the first frame at or after ``local_in`` (``local_in`` if none).
    Reads video packets from where ``source`` stands: with B-frames the smallest pts
    is known once the decode times pass it (a later packet's pts >= its dts)."""
    best: Fraction | None = None
    for packet in source.demux(video):
        if packet.dts is None and packet.pts is None:
            continue
        if best is not None and _seconds(_time(packet.dts, packet.pts), packet) >= best:
            break
        at = _seconds(_time(packet.pts, packet.dts), packet)
        if at >= local_in - EPSILON_S and (best is None or at < best):
            best = at
    return local_in if best is None else best


class _Copier:
    """One piece's packets, demuxed in file order and muxed shifted."""

    def __init__(
        self, output: OutputContainer, state: CopyState, piece: Piece, has_audio: bool
    ) -> None:
        self.output = output
        self.state = state
        self.piece = piece
        self.shift = Fraction(piece.shift) - state.lead
        self.local_in = Fraction(piece.local_in)
        self.local_out = Fraction(piece.local_out)
        self.started = False  # the first keyframe was copied
        self.video_done = False
        self.audio_done = not has_audio or state.audio_stream is None
        self.held_audio: list[Packet] = []  # before the cut, for the decoder's warm-up

    def run(self, source: InputContainer, video: VideoStream, audio: AudioStream | None) -> None:
        streams = [video] if audio is None or self.state.audio_stream is None else [video, audio]
        for packet in source.demux(streams):
            if packet.dts is None and packet.pts is None:
                continue  # the demuxer's flush packet
            if packet.stream.type == "video":
                self._video(packet)
            else:
                self._audio(packet)
            if self.video_done and self.audio_done:
                break

    def _video(self, packet: Packet) -> None:
        local = _seconds(_time(packet.pts, packet.dts), packet)
        if local >= self.local_out - EPSILON_S:
            # Decode order past the cut (no B-frames in what the recorder writes, so
            # nothing after this is shown before it).
            self.video_done = True
            return
        if not self.started:
            if not packet.is_keyframe:
                return
            if not self.piece.first and local < self.local_in - EPSILON_S:
                return  # a later clip overlapping what is covered: from a keyframe after
            self.started = True
            if self.state.first_keyframe is None:
                self.state.first_keyframe = self.piece.source.clip.start + float(local)
        shift = self.shift
        dts = _seconds(_time(packet.dts, packet.pts), packet) + shift
        last = self.state.last_video_dts
        if last is not None and dts <= last:
            shift += last - dts + _tick(packet)  # a seam rounded a tick early: keep order
            self.shift = shift
            dts = last + _tick(packet)
        _move(packet, shift)
        packet.stream = self.state.video_stream
        self.output.mux(packet)
        self.state.last_video_dts = dts
        self.state.video_packets += 1

    def _audio(self, packet: Packet) -> None:
        if packet.pts is None:
            return
        local = _seconds(packet.pts, packet)
        length = _seconds(packet.duration or 0, packet)
        if local >= self.local_out - EPSILON_S:
            self.audio_done = True
            return
        if local + length <= self.local_in + EPSILON_S:
            if self.piece.first:  # before the cut: kept for the decoder's warm-up
                self.held_audio = [*self.held_audio, packet][-AUDIO_WARMUP_PACKETS:]
            return
        for held in self.held_audio:
            self._write_audio(held)
        self.held_audio = []
        self._write_audio(packet)

    def _write_audio(self, packet: Packet) -> None:
        assert packet.pts is not None
        start = _seconds(packet.pts, packet) + self.shift
        length = _seconds(packet.duration or 0, packet)
        end = self.state.audio_end
        if end is not None and start < end - length / 2:
            return  # overlaps sound already written (a clip's first, priming, packet)
        _move(packet, self.shift)
        packet.stream = self.state.audio_stream
        self.output.mux(packet)
        self.state.audio_end = start + length
        self.state.audio_packets += 1


def _seconds(ticks: int, packet: Packet) -> Fraction:
    time_base = packet.time_base
    assert time_base is not None
    return ticks * Fraction(time_base)


def _time(first: int | None, second: int | None) -> int:
    """``first``, else ``second`` (a packet has at least one time past the flush check)."""
    if first is not None:
        return first
    assert second is not None
    return second


def _tick(packet: Packet) -> Fraction:
    assert packet.time_base is not None
    return Fraction(packet.time_base)


def _move(packet: Packet, shift: Fraction) -> None:
    """Shift ``packet``'s times by ``shift`` seconds (in its own time base)."""
    assert packet.time_base is not None
    ticks = round(shift / Fraction(packet.time_base))
    if packet.pts is not None:
        packet.pts += ticks
    if packet.dts is not None:
        packet.dts += ticks
