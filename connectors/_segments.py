"""Video segments: self-contained files of ``segment_s`` encoded from raw frames.

Each segment gets its own muxer and its own encoder, so it starts with a keyframe
(the first frame is also marked ``I`` explicitly) and carries its own init data: a
fragmented MP4 (``frag_keyframe+empty_moov+default_base_moof``) for H.264, a WebM for
VP8/VP9. Timestamps start at 0 in each file; the segment's place in the source is in
its meta (``pts`` of the first frame). A segment closes when a frame arrives
``segment_s`` after its first one, when an epoch changes (a gap: reconnect), when the
frame size changes, or on :meth:`SegmentEncoder.flush`.

Frames are encoded with the time they were captured (90 kHz ticks), so frames skipped
at the capture edge leave a gap in time, not a speed-up. Runs on an encoding thread
(see :mod:`connectors._lanes`): every method blocks.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import av
import av.error
from av.container import OutputContainer
from av.video.frame import PictureType
from av.video.stream import VideoStream

from connectors._frames import FrameConverter
from connectors._options import EncodeCodec
from connectors._timeline import Epoch
from mediaflow.live.h264 import to_avcc
from mediaflow.live.parts import VideoFrame

TICK = Fraction(1, 90000)
DEFAULT_FPS = 30.0


@dataclass(frozen=True)
class CodecPlan:
    """How one ``codec`` option value is encoded and muxed."""

    encoder: str
    container: str
    media_type: str
    pix_fmts: tuple[str, ...]  # accepted as they come; anything else -> the first
    options: dict[str, str]
    mux_options: dict[str, str] = field(default_factory=dict)
    bits_per_pixel: float | None = None  # a bitrate cap per pixel per frame, when needed
    threads: int = 0  # encoder threads; 0 lets FFmpeg choose


PLANS: dict[EncodeCodec, CodecPlan] = {
    # bf=0: with B-frames the first frame of a fragmented MP4 (which has no edit list)
    # would be presented late instead of at 0. x264 accepts full-range input and says
    # so in its VUI, which spares MJPEG cameras a range conversion. rc-lookahead=2: the
    # live view plays these frames, and veryfast's 10-frame lookahead holds each frame
    # 11 frames (0.73 s at 15 fps); 2 holds it 3 for 4 % more bytes (0 loses mbtree: +60 %).
    "h264": CodecPlan(
        "libx264",
        "mp4",
        "video/mp4",
        ("yuv420p", "yuvj420p"),
        {"preset": "veryfast", "bf": "0", "rc-lookahead": "2"},
        {"movflags": "frag_keyframe+empty_moov+default_base_moof"},
    ),
    # libvpx in CQ mode needs a bitrate ceiling: ~0.1 bit per pixel is ample at crf 10.
    # One thread: VP8's worker threads busy-wait for each other, which costs 30 % more
    # CPU on an idle machine and several times more on a busy one (bench/capture.py);
    # alone it still encodes 720p at ~170 fps.
    "vp8": CodecPlan(
        "libvpx",
        "webm",
        "video/webm",
        ("yuv420p",),
        {"deadline": "realtime", "cpu-used": "8", "lag-in-frames": "0", "crf": "10"},
        bits_per_pixel=0.1,
        threads=1,
    ),
    "vp9": CodecPlan(
        "libvpx-vp9",
        "webm",
        "video/webm",
        ("yuv420p",),
        {
            "deadline": "realtime",
            "cpu-used": "8",
            "row-mt": "1",
            "lag-in-frames": "0",
            "crf": "32",
            "b": "0",
        },
    ),
}


@dataclass(frozen=True)
class SegmentJob:
    """One captured frame for the segment lane: decoded, or an MJPEG packet."""

    frame: av.VideoFrame | None
    packet: bytes | None
    pts: float  # source pts
    captured_at: float
    epoch: Epoch


@dataclass(frozen=True)
class EncodedSegment:
    """A finished segment and the facts its meta reports."""

    data: bytes
    media_type: str
    epoch: Epoch
    pts: float
    duration: float
    captured_at: float
    width: int
    height: int
    codec: str
    fps: float
    frames: int
    audio_codec: str | None = None  # the sound a copied segment carries
    copied: bool = False  # the source's own packets, not encoded here


LiveTap = Callable[[bytes, VideoFrame], None]
"""Called on the encoding thread with the encoder's Annex B parameter sets and each
encoded H.264 frame on the capture clock, as it leaves the encoder (live view)."""


class _OpenSegment:
    """One segment being written: its muxer, encoder and counters."""

    def __init__(
        self, plan: CodecPlan, codec: str, fps: float, size: tuple[int, int], pix_fmt: str,
        job: SegmentJob, tap: LiveTap | None = None,
    ) -> None:  # fmt: skip
        self.plan, self.codec, self.fps = plan, codec, fps
        self.width, self.height = size
        self.pix_fmt = pix_fmt
        self.epoch = job.epoch
        self.first_pts, self.last_pts = job.pts, job.pts
        self.captured_at = job.captured_at
        self.frames = 0
        self._last_tick = -1
        self._tap = tap if codec == "h264" else None
        self._captured: dict[int, float] = {}  # tick -> captured_at, for the tap
        self._buffer = io.BytesIO()
        self._container: OutputContainer = av.open(
            self._buffer, "w", format=plan.container, options=plan.mux_options
        )
        stream = self._container.add_stream(
            plan.encoder, rate=Fraction(fps).limit_denominator(1001)
        )
        assert isinstance(stream, VideoStream)
        stream.width, stream.height, stream.pix_fmt = self.width, self.height, pix_fmt
        stream.codec_context.time_base = TICK
        stream.codec_context.thread_count = plan.threads
        if plan.bits_per_pixel is not None:
            bits = self.width * self.height * fps * plan.bits_per_pixel
            stream.codec_context.bit_rate = int(bits)
        stream.options = dict(plan.options)
        self._stream = stream

    def add(
        self, frame: av.VideoFrame, pts: float, captured_at: float, converter: FrameConverter
    ) -> None:
        ready = converter.convert(frame, self.width, self.height, self.pix_fmt)
        # Capture clocks jitter: never hand the encoder two frames on one tick.
        tick = max(round((pts - self.first_pts) / TICK), self._last_tick + 1)
        self._last_tick = tick
        ready.pts, ready.time_base = tick, TICK
        # Decoders and lavfi mark every frame as a keyframe; left so, each frame would
        # be encoded as an I-frame. Only the first one of a segment must be.
        ready.pict_type = PictureType.I if self.frames == 0 else PictureType.NONE
        if self._tap is not None:
            self._captured[tick] = captured_at
        self._container.mux(self._tap_packets(self._stream.encode(ready)))
        self.frames += 1
        self.last_pts = pts

    def _tap_packets(self, packets: list[av.Packet[Any]]) -> list[av.Packet[Any]]:
        if self._tap is not None:
            extradata = self._stream.codec_context.extradata or b""
            for packet in packets:
                captured = self._captured.pop(packet.pts, None) if packet.pts is not None else None
                if captured is not None:
                    data = bytes(packet)  # the sample made here, not on the event loop
                    frame = VideoFrame(
                        data, captured, bool(packet.is_keyframe), sample=to_avcc(data)
                    )
                    self._tap(extradata, frame)
        return packets

    def close(self) -> EncodedSegment:
        self._container.mux(self._tap_packets(self._stream.encode(None)))
        self._container.close()
        return EncodedSegment(
            data=self._buffer.getvalue(),
            media_type=self.plan.media_type,
            epoch=self.epoch,
            pts=self.first_pts,
            duration=self.last_pts - self.first_pts + 1 / self.fps,
            captured_at=self.captured_at,
            width=self.width,
            height=self.height,
            codec=self.codec,
            fps=self.fps,
            frames=self.frames,
        )


class SegmentEncoder:
    """Cuts frames into segments (the lane work of the ``video`` port)."""

    def __init__(
        self,
        codec: EncodeCodec,
        segment_s: float,
        *,
        fps: float | None = None,
        size: tuple[int, int] | None = None,
        tap: LiveTap | None = None,
    ) -> None:
        """``fps`` is the camera's nominal rate (container default frame duration and
        rate control); ``size`` resizes frames; ``tap`` sees every encoded H.264
        frame (live view)."""
        self.codec = codec
        self.plan = PLANS[codec]
        self.segment_s = segment_s
        self.fps = fps or DEFAULT_FPS
        self.size = size
        self.tap = tap
        # A frame within a quarter interval of the boundary belongs to the next segment:
        # camera clocks jitter around exact multiples of 1/fps.
        self._tolerance = 0.25 / self.fps
        self._open: _OpenSegment | None = None
        self._mjpeg: av.VideoCodecContext | None = None
        self._converter = FrameConverter()
        self.decode_errors = 0

    def push(self, job: SegmentJob) -> list[EncodedSegment]:
        """Add one frame; returns the segment it completed, if any."""
        frame = job.frame if job.frame is not None else self._decode(job.packet)
        if frame is None:
            return []
        size = self._size_of(frame)
        done: list[EncodedSegment] = []
        current = self._open
        if current is not None and (
            job.epoch.index != current.epoch.index
            or (current.width, current.height) != size
            or job.pts - current.first_pts >= self.segment_s - self._tolerance
        ):
            done = self.flush()
        if self._open is None:
            fmt = frame.format.name
            pix_fmt = fmt if fmt in self.plan.pix_fmts else self.plan.pix_fmts[0]
            self._open = _OpenSegment(self.plan, self.codec, self.fps, size, pix_fmt, job, self.tap)
        self._open.add(frame, job.pts, job.captured_at, self._converter)
        return done

    def flush(self) -> list[EncodedSegment]:
        """Close the open segment, if any, and return it."""
        current, self._open = self._open, None
        return [current.close()] if current is not None else []

    def _size_of(self, frame: av.VideoFrame) -> tuple[int, int]:
        width, height = self.size if self.size is not None else (frame.width, frame.height)
        # 4:2:0 encoders need even dimensions.
        return width - width % 2, height - height % 2

    def _decode(self, packet: bytes | None) -> av.VideoFrame | None:
        """An MJPEG passthrough packet decoded for the encoder; None if it is torn."""
        if packet is None:
            return None
        if self._mjpeg is None:
            decoder = av.CodecContext.create("mjpeg", "r")
            assert isinstance(decoder, av.VideoCodecContext)
            self._mjpeg = decoder
        try:
            frames = self._mjpeg.decode(av.Packet(packet))
        except av.error.InvalidDataError:
            self.decode_errors += 1
            return None
        return frames[0] if frames else None
