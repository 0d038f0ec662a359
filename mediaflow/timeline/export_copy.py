"""The packet copying of an export (:mod:`mediaflow.timeline.export`): blocking, PyAV.

Each piece of a plan (:mod:`mediaflow.timeline.cut`) is demuxed from its clip and
its packets are muxed shifted by the piece's offset: output time = clip time +
``piece.shift``. The first piece starts at the keyframe at or before its cut (times
before 0 become the edit list); later pieces start at their first keyframe.
"""

from __future__ import annotations

import math
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

from mediaflow.timeline.cut import CannotExport, ClipFile, Piece
from mediaflow.timeline.times import iso

# The sound packet before the cut is copied too: an AAC decoder needs one packet to
# warm up (its first output is overlap-added with the previous frame); the edit list
# hides it.
AUDIO_WARMUP_PACKETS = 1
EPSILON = Fraction(1, 1_000_000)  # one microsecond


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
        if at >= local_in - EPSILON and (best is None or at < best):
            best = at
    return local_in if best is None else best


class _Copier:
    """One piece's packets, demuxed in file order and muxed shifted.

    Per packet the arithmetic is on integers in the stream's own time base (the cut
    points and the shift converted once per piece): Fractions per packet were 60 %
    of an export's time.
    """

    def __init__(
        self, output: OutputContainer, state: CopyState, piece: Piece, has_audio: bool
    ) -> None:
        self.output = output
        self.state = state
        self.piece = piece
        self.shift = Fraction(piece.shift) - state.lead
        self.started = False  # the first keyframe was copied
        self.video_done = False
        self.audio_done = not has_audio or state.audio_stream is None
        self.held_audio: list[Packet] = []  # before the cut, for the decoder's warm-up
        self.video: _Ticks | None = None
        self.audio: _Ticks | None = None

    def run(self, source: InputContainer, video: VideoStream, audio: AudioStream | None) -> None:
        copy_audio = audio is not None and self.state.audio_stream is not None
        self.video = self._ticks(video.time_base, self.state.last_video_dts)
        if copy_audio and audio is not None:
            self.audio = self._ticks(audio.time_base, self.state.audio_end)
        for packet in source.demux([video, audio] if copy_audio and audio else [video]):
            if packet.dts is None and packet.pts is None:
                continue  # the demuxer's flush packet
            if packet.stream.type == "video":
                self._video(packet, self.video)
            elif self.audio is not None:
                self._audio(packet, self.audio)
            if self.video_done and self.audio_done:
                break
        self.state.last_video_dts = self.video.seconds(self.video.last)
        if self.audio is not None:
            self.state.audio_end = self.audio.seconds(self.audio.last)

    def _ticks(self, time_base: Fraction | None, last: Fraction | None) -> _Ticks:
        if time_base is None:
            raise CannotExport(f"a track of {self.piece.source.path.name} has no time base")
        tb = Fraction(time_base)
        piece = self.piece
        return _Ticks(
            tb,
            cut_in=math.ceil((Fraction(piece.local_in) - EPSILON) / tb),
            warm_up_end=math.floor((Fraction(piece.local_in) + EPSILON) / tb),
            cut_out=math.ceil((Fraction(piece.local_out) - EPSILON) / tb),
            shift=round(self.shift / tb),
            last=None if last is None else math.floor(last / tb),
        )

    def _video(self, packet: Packet, ticks: _Ticks) -> None:
        pts = _time(packet.pts, packet.dts)
        if pts >= ticks.cut_out:
            # Decode order past the cut (no B-frames in what the recorder writes, so
            # nothing after this is shown before it).
            self.video_done = True
            return
        if not self.started:
            if not packet.is_keyframe:
                return
            if not self.piece.first and pts < ticks.cut_in:
                return  # a later clip overlapping what is covered: from a keyframe after
            self.started = True
            if self.state.first_keyframe is None:
                self.state.first_keyframe = self.piece.source.clip.start + float(pts * ticks.tb)
        dts = _time(packet.dts, packet.pts) + ticks.shift
        if ticks.last is not None and dts <= ticks.last:
            ticks.shift += ticks.last + 1 - dts  # a seam rounded a tick early: keep order
            dts = ticks.last + 1
        _move(packet, ticks.shift)
        packet.stream = self.state.video_stream
        self.output.mux(packet)
        ticks.last = dts
        self.state.video_packets += 1

    def _audio(self, packet: Packet, ticks: _Ticks) -> None:
        if packet.pts is None:
            return
        if packet.pts >= ticks.cut_out:
            self.audio_done = True
            return
        if packet.pts + (packet.duration or 0) <= ticks.warm_up_end:
            if self.piece.first:  # before the cut: kept for the decoder's warm-up
                self.held_audio = [*self.held_audio, packet][-AUDIO_WARMUP_PACKETS:]
            return
        for held in self.held_audio:
            self._write_audio(held, ticks)
        self.held_audio = []
        self._write_audio(packet, ticks)

    def _write_audio(self, packet: Packet, ticks: _Ticks) -> None:
        assert packet.pts is not None
        start, length = packet.pts + ticks.shift, packet.duration or 0
        if ticks.last is not None and 2 * start < 2 * ticks.last - length:
            return  # overlaps sound already written (a clip's first, priming, packet)
        _move(packet, ticks.shift)
        packet.stream = self.state.audio_stream
        self.output.mux(packet)
        ticks.last = start + length
        self.state.audio_packets += 1


@dataclass
class _Ticks:
    """A piece's cut points and shift in one stream's time base; ``last``: the output
    dts written last (video) or where the sound written ends (audio)."""

    tb: Fraction
    cut_in: int  # first tick at or after the cut (less a microsecond)
    warm_up_end: int  # sound ending at or before this is before the cut
    cut_out: int  # first tick at or after the end
    shift: int
    last: int | None

    def seconds(self, ticks: int | None) -> Fraction | None:
        return None if ticks is None else ticks * self.tb


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


def _move(packet: Packet, ticks: int) -> None:
    """Shift ``packet``'s times by ``ticks`` of its own time base."""
    if packet.pts is not None:
        packet.pts += ticks
    if packet.dts is not None:
        packet.dts += ticks
