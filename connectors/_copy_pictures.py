"""JPEGs of a copied source at ``fps``, decoding as few of its pictures as that takes.

A copied camera's pictures are never decoded for its segments or its live view; only
the ``image`` port needs pixels. :class:`PictureChooser` (pure, on the event loop)
picks the packets the decoder must see:

- while ``1/fps`` is at least the time between keyframes, only keyframes: each one
  that is due is decoded on its own (a keyframe needs no other picture), nothing
  else is decoded at all;
- otherwise a group of pictures is decoded from its keyframe up to the last picture
  due in it, and the rest of the group is skipped until the next keyframe.

Until the first interval between keyframes is known, a live camera's keyframes are
decoded alone: its first group gives one JPEG at most (a camera's whole first group
arrives at once when it connects; decoding it would overflow the lane). A file's
first group is decoded through. :class:`PictureWork` decodes on the JPEG lane's
thread and encodes the due pictures (:mod:`connectors._jpeg`). Meta keeps the
capture facts either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import av
import av.error

from connectors._jpeg import JpegEncoder
from connectors._timeline import Epoch
from connectors._video_ports import EncodedJpeg, JpegPacer
from devices import CapturedPacket, StreamTemplates

# Decoder threads per camera: one keeps a decoded picture from waiting on others
# (frame threads hold pictures back) and a busy machine's cores shared between cameras.
DECODER_THREADS = 1


@dataclass(frozen=True)
class PictureChoice:
    """What to do with one video packet: decode it (always, when chosen), make a JPEG
    of its picture (``emit``), and drain the decoder after it (``alone``: a keyframe
    decoded by itself)."""

    emit: bool
    alone: bool


class PictureChooser:
    """Decides which packets are decoded for JPEGs at ``fps`` (see the module doc). Pure.

    Call :meth:`choose` for every video packet in decode order, and :meth:`broken` when
    a packet it chose could not be handed to the decoder (the rest of that group of
    pictures cannot be decoded).
    """

    def __init__(self, fps: float, frame_interval: float, *, first_group: bool = False) -> None:
        """``first_group``: decode the first group through (a file), instead of its
        keyframe alone (a live camera)."""
        self._first_group = first_group
        self._pacer = JpegPacer(fps, frame_interval)
        self.period = self._pacer.period
        self.tolerance = self._pacer.tolerance
        self._keyframe_at: float | None = None
        self._gop_s: float | None = None  # the newest interval between keyframes
        self._feeding = False  # the decoder follows the current group of pictures

    @property
    def keyframes_only(self) -> bool:
        """Whether only keyframes are decoded now (the period spans a whole group)."""
        return self._gop_s is not None and self.period >= self._gop_s - self.tolerance

    def choose(self, pts: float, keyframe: bool) -> PictureChoice | None:
        """The choice for the video packet presented at ``pts`` (None: not decoded)."""
        if keyframe:
            if self._keyframe_at is not None and pts > self._keyframe_at:
                self._gop_s = pts - self._keyframe_at
            self._keyframe_at = pts
            emit = self._pacer.due(pts)
            self._feeding = self._due_in_group()
            if not (emit or self._feeding):
                return None
            return PictureChoice(emit=emit, alone=not self._feeding)
        if not self._feeding:
            return None
        emit = self._pacer.due(pts)
        if emit and not self._due_in_group():
            self._feeding = False  # the last picture this group owes: decoded, then stop
        return PictureChoice(emit=emit, alone=False)

    def broken(self) -> None:
        """A chosen packet never reached the decoder: wait for the next keyframe."""
        self._feeding = False

    def _due_in_group(self) -> bool:
        """Whether a JPEG falls due before the next keyframe is expected."""
        due = self._pacer.next_due
        if self._gop_s is None or self._keyframe_at is None or due is None:
            return self._first_group  # the first group, of unknown length
        return due < self._keyframe_at + self._gop_s - self.tolerance


@dataclass(frozen=True)
class PictureJob:
    """A packet for the picture lane. ``pts``: source time of its picture."""

    packet: CapturedPacket
    pts: float
    epoch: Epoch
    templates: StreamTemplates
    choice: PictureChoice


class PictureWork:
    """Lane work of a copied source's ``image`` port: decode what was chosen, encode the
    due pictures. Blocking. Torn packets are counted in ``decode_errors`` and skipped."""

    def __init__(self, encoder: JpegEncoder) -> None:
        self.encoder = encoder
        self.decoded = 0  # pictures the decoder produced
        self.decode_errors = 0
        self._decoder: av.VideoCodecContext | None = None
        self._templates: StreamTemplates | None = None
        self._waiting: dict[int, PictureJob] = {}  # by packet pts: pictures in the decoder

    def push(self, job: PictureJob) -> list[EncodedJpeg]:
        decoder = self._decoder_for(job.templates)
        packet = av.Packet(job.packet.data)
        packet.pts, packet.dts = job.packet.pts, job.packet.dts
        packet.time_base = job.packet.time_base
        self._waiting[job.packet.pts] = job
        try:
            frames = decoder.decode(packet)
            if job.choice.alone:
                frames += decoder.decode(None)  # drain: the keyframe's picture, now
                decoder.flush_buffers()
        except av.error.InvalidDataError:
            self.decode_errors += 1
            self._waiting.pop(job.packet.pts, None)
            return []
        return self._jpegs(frames)

    def flush(self) -> list[EncodedJpeg]:
        if self._decoder is None:
            return []
        frames = self._decoder.decode(None)
        self._decoder.flush_buffers()
        return self._jpegs(frames)

    def _jpegs(self, frames: list[av.VideoFrame]) -> list[EncodedJpeg]:
        out: list[EncodedJpeg] = []
        for frame in frames:
            self.decoded += 1
            job = self._waiting.pop(frame.pts, None) if frame.pts is not None else None
            if job is None or not job.choice.emit:
                continue
            data = self.encoder.encode(frame)
            captured_at = job.packet.captured_at
            out.append(
                EncodedJpeg(data, job.pts, captured_at, frame.width, frame.height, job.epoch)
            )
        if len(self._waiting) > 64:  # pictures a decoder never returned (torn, skipped)
            for pts in sorted(self._waiting)[:-16]:
                del self._waiting[pts]
        return out

    def _decoder_for(self, templates: StreamTemplates) -> av.VideoCodecContext:
        if self._decoder is None or templates is not self._templates:
            decoder = av.CodecContext.create(templates.video_codec, "r")
            assert isinstance(decoder, av.VideoCodecContext)
            if templates.video_extradata:
                decoder.extradata = templates.video_extradata
            decoder.thread_count = DECODER_THREADS
            self._decoder, self._templates = decoder, templates
            self._waiting.clear()
        return self._decoder
