"""Emitting a video source: JPEGs at ``fps`` on ``image``, segments on ``video``.

Shared by the camera, file and URL connectors. The capture loop runs on the event loop
and does no pixel work: for each captured frame it decides whether a JPEG is due
(one per ``1/fps`` of source time) and whether segments are wanted, and hands the frame
to an encoding lane (:mod:`connectors._lanes`) for each. When a lane is full the frame
is skipped there, at the capture edge, counted and reported (``frames_skipped``
events, :meth:`VideoRun.statistics`); a file replayed with ``realtime = false`` waits
instead, losing nothing. MJPEG passthrough: a camera's JPEG bytes are emitted as
they are, and decoded only when a segment needs the pixels.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import av

from connectors._emit import CounterReport, PortEmitter, emit_lane
from connectors._jpeg import JpegEncoder, make_jpeg_encoder
from connectors._lanes import EncodeLane
from connectors._options import Codec
from connectors._reconnect import Reconnect, SourceRun
from connectors._segments import DEFAULT_FPS, EncodedSegment, SegmentEncoder, SegmentJob
from connectors._timeline import Epoch, Resume
from connectors._together import run_together
from devices import CapturedFrame, VideoInput, open_video
from devices.video_spec import NETWORK_TIMEOUT_S, parse_video_spec
from mediaflow import Context, MediaRef
from mediaflow.live.hub import HUB

CAPTURE_KINDS = frozenset({"v4l2", "avfoundation", "dshow"})
# How long a lane's hand-off may hold frames, queued or being encoded, before the
# capture edge skips. A stall shorter than this (another thread holding the GIL, a
# segment's encoder being flushed and the next one opened, ~0.1-0.2 s) delays
# frames instead of losing them; a longer one is a lane that cannot keep up, and
# waiting longer would only grow memory (a 720p frame is 1.4 MB).
JPEG_LANE_S = 0.25
SEGMENT_LANE_S = 0.5
# Encoded JPEGs waiting for the emitter, whose saves fsync: on a virtual disk an
# fsync, or a sweep's batch, stalls saves for a few hundred ms now and then. A
# JPEG is ~0.1 MB where its frame was 1.4: waiting here is cheap (measured with
# ``python -m bench.scale``: a camera beside 16 speech nodes skipped frames in those
# stalls with two JPEGs of room, none with a second's worth).
JPEG_RESULTS_S = 1.0
JPEG_SAVES_AHEAD = 3  # JPEG saves written at once (see connectors._emit.emit_lane)


def lane_capacity(seconds: float, fps: float | None, least: int) -> int:
    """Frames a lane holding ``seconds`` of a ``fps`` source needs, at least ``least``."""
    return max(least, math.ceil(seconds * (fps or DEFAULT_FPS)))


@dataclass(frozen=True)
class VideoRequest:
    """How to open a video source; ``size`` is asked of a capture device and applied
    as a resize to anything else (files, lavfi and streams fix their own size).
    ``timeout_s`` bounds each blocking step of a network stream (ignored otherwise)."""

    spec: str
    size: tuple[int, int] | None = None
    rate: float | None = None
    input_format: str | None = None
    realtime: bool | None = None
    timeout_s: float = NETWORK_TIMEOUT_S

    @property
    def resize(self) -> tuple[int, int] | None:
        """The size frames are scaled to after decoding (None: keep)."""
        return None if self._is_capture_device() else self.size

    def open(self, start_s: float = 0.0) -> VideoInput:
        """Open the source (blocks: call it in a thread); a file from ``start_s``. Raises what
        :func:`devices.open_video` raises: ``DeviceNotFound``/``UnsupportedMode`` list
        what is available."""
        device = self._is_capture_device()
        if not device and (self.rate is not None or self.input_format is not None):
            raise ValueError(
                f"rate and input_format only apply to capture devices; {self.spec!r} "
                "fixes them itself"
            )
        return open_video(
            self.spec,
            size=self.size if device else None,
            fps=self.rate,
            input_format=self.input_format,
            realtime=self.realtime,
            # No resize asked: an MJPEG camera's JPEGs are emitted as they are.
            passthrough=self.resize is None,
            timeout_s=self.timeout_s,
            start_s=start_s,
        )

    async def open_async(self, start_s: float = 0.0) -> VideoInput:
        return await asyncio.to_thread(self.open, start_s)

    def _is_capture_device(self) -> bool:
        return parse_video_spec(self.spec).kind in CAPTURE_KINDS


@dataclass(frozen=True)
class VideoOptions:
    """The emission half of the camera options (see :class:`CameraConnector`)."""

    fps: float = 15.0
    quality: int = 85
    segment_s: float = 2.0
    codec: Codec = "h264"
    video: bool | None = None
    live_audio: str | None = None  # the node whose sound the live view carries
    live_part_s: float = 0.5  # the live view's parts


@dataclass(frozen=True)
class JpegJob:
    frame: av.VideoFrame | None
    packet: bytes | None
    pts: float
    captured_at: float
    width: int
    height: int
    epoch: Epoch


@dataclass(frozen=True)
class EncodedJpeg:
    data: bytes
    pts: float
    captured_at: float
    width: int
    height: int
    epoch: Epoch


class JpegWork:
    """Lane work of the ``image`` port: passthrough bytes, or an encode."""

    def __init__(self, encoder: JpegEncoder, resize: tuple[int, int] | None) -> None:
        self.encoder = encoder
        self.resize = resize

    def push(self, job: JpegJob) -> list[EncodedJpeg]:
        if job.packet is not None:
            data, width, height = job.packet, job.width, job.height
        else:
            assert job.frame is not None  # a CapturedFrame holds one or the other
            data = self.encoder.encode(job.frame)
            width, height = self.resize or (job.width, job.height)
        return [EncodedJpeg(data, job.pts, job.captured_at, width, height, job.epoch)]

    def flush(self) -> list[EncodedJpeg]:
        return []


class JpegPacer:
    """Picks the frames that become JPEGs: the first frame at or after each due time.

    A frame up to half a frame interval early counts (camera clocks jitter around the
    nominal rate); after a gap the schedule restarts from the frame instead of
    catching up in a burst.
    """

    def __init__(self, fps: float, frame_interval: float) -> None:
        self.period = 1.0 / fps
        self.tolerance = min(self.period, frame_interval) / 2
        self._due: float | None = None

    def due(self, pts: float) -> bool:
        if self._due is not None and pts < self._due - self.tolerance:
            return False
        self._due = (self._due if self._due is not None else pts) + self.period
        if self._due <= pts:
            self._due = pts + self.period
        return True


class VideoRun(SourceRun[VideoInput]):
    """One run of a video source: capture loop, two lanes, two emitters."""

    def __init__(
        self,
        ctx: Context,
        request: VideoRequest,
        options: VideoOptions,
        resume: Resume | None,
        *,
        device: str | None = None,
        seeked_at: float | None = None,
    ) -> None:
        super().__init__(ctx, device or request.spec, resume, seeked_at=seeked_at)
        self.request = request
        self.options = options
        self.images = PortEmitter(ctx, "image", self.device, resume)
        self.segments = PortEmitter(ctx, "video", self.device, resume)
        self.skips = CounterReport(ctx, "frames_skipped", self.device)
        self._pacer: JpegPacer | None = None
        self._lossless = False
        self._capture_dropped = 0  # frames the device bridge dropped, closed inputs
        self._open_input: VideoInput | None = None
        self._jpeg_lane: EncodeLane[JpegJob, EncodedJpeg] | None = None
        self._segment_lane: EncodeLane[SegmentJob, EncodedSegment] | None = None

    def wants_video(self) -> bool:
        """``video`` option, else whether any node reads the ``video`` port."""
        if self.options.video is not None:
            return self.options.video
        has_readers: Callable[[str], bool] | None = getattr(self.ctx, "has_readers", None)
        return True if has_readers is None else has_readers("video")

    async def run(
        self, first: VideoInput, *, policy: Reconnect, reopen: Callable[[], Awaitable[VideoInput]]
    ) -> None:
        """Emit until the source ends (a file) or the flow stops. Raises the source's
        or an encoder's error."""
        info = first.info
        self._pacer = JpegPacer(self.options.fps, 1.0 / (info.fps or DEFAULT_FPS))
        self._lossless = not info.is_live and self.request.realtime is False
        resize = self.request.resize
        jpeg_rate = min(info.fps or DEFAULT_FPS, self.options.fps)
        self._jpeg_lane = EncodeLane(
            f"jpeg {self.device}",
            JpegWork(make_jpeg_encoder(self.options.quality, resize), resize),
            capacity=lane_capacity(JPEG_LANE_S, info.fps, 2),
            results=lane_capacity(JPEG_RESULTS_S, jpeg_rate, 2),
        )
        tap = None
        if self.wants_video():
            # Live view reads the H.264 the segments are made of: no second encode.
            if self.options.codec == "h264":
                tap = HUB.tap(
                    self.ctx.flow,
                    self.ctx.node,
                    self.options.live_audio,
                    part_s=self.options.live_part_s,
                    keyframe_s=self.options.segment_s,
                )
            encoder = SegmentEncoder(
                self.options.codec, self.options.segment_s, fps=info.fps, size=resize, tap=tap
            )
            self._segment_lane = EncodeLane(
                f"segments {self.device}",
                encoder,
                capacity=lane_capacity(SEGMENT_LANE_S, info.fps, 8),
            )
        lanes = [lane for lane in (self._jpeg_lane, self._segment_lane) if lane is not None]
        emitters = [
            emit_lane(self._jpeg_lane, self._save_jpeg, self.images.publish, ahead=JPEG_SAVES_AHEAD)
        ]
        if self._segment_lane is not None:
            segments = self._segment_lane
            emitters.append(emit_lane(segments, self._save_segment, self.segments.publish))
        capture = self._capture(first, lanes, policy=policy, reopen=reopen)
        try:
            await run_together(capture, *emitters)
        finally:
            if tap is not None:
                HUB.drop(self.ctx.flow, self.ctx.node, tap)  # nothing live here any more
            for lane in lanes:
                await lane.close()
            self.skips.update(self.skipped(), force=True)

    async def _capture(
        self,
        first: VideoInput,
        lanes: list[EncodeLane[Any, Any]],
        *,
        policy: Reconnect,
        reopen: Callable[[], Awaitable[VideoInput]],
    ) -> None:
        try:
            await self.supervise(first, policy=policy, reopen=reopen)
        finally:
            for lane in lanes:
                lane.finish()  # the emitters drain what is left, then return

    def skipped(self) -> dict[str, int]:
        """Frames skipped so far: by the device bridge (``capture``) and per lane."""
        capture = self._capture_dropped
        if self._open_input is not None:
            capture += self._open_input.statistics().bridge.dropped
        counts = {"capture": capture, "jpeg": 0, "video": 0}
        if self._jpeg_lane is not None:
            counts["jpeg"] = self._jpeg_lane.statistics().skipped
        if self._segment_lane is not None:
            counts["video"] = self._segment_lane.statistics().skipped
        return counts

    def statistics(self) -> dict[str, Any]:
        """Emitted, encoded and skipped counts, for metrics and tests."""
        lane = self._segment_lane
        return {
            "images": self.images.emitted,
            "segments": self.segments.emitted,
            "segment_frames": lane.statistics().accepted if lane is not None else 0,
            "skipped": self.skipped(),
        }

    async def consume(self, source: VideoInput) -> None:
        self._open_input = source
        epoch: Epoch | None = None
        interval = 1.0 / (source.info.fps or DEFAULT_FPS)
        try:
            async for item in source:
                if self.ctx.stopping():
                    return
                if epoch is None:
                    epoch = self.timeline.begin()
                pts = item.pts + epoch.offset
                self.timeline.seen(pts, interval)
                await self._hand_off(item, pts, epoch)
                self.skips.update(self.skipped())
        finally:
            self._capture_dropped += source.statistics().bridge.dropped
            self._open_input = None

    async def _hand_off(self, item: CapturedFrame, pts: float, epoch: Epoch) -> None:
        assert self._jpeg_lane is not None and self._pacer is not None
        if self._pacer.due(pts):
            job = JpegJob(
                item.frame, item.packet, pts, item.captured_at, item.width, item.height, epoch
            )
            await self._send(self._jpeg_lane, job)
        if self._segment_lane is not None:
            segment_job = SegmentJob(item.frame, item.packet, pts, item.captured_at, epoch)
            await self._send(self._segment_lane, segment_job)

    async def _send(self, lane: EncodeLane[Any, Any], job: object) -> None:
        if self._lossless:
            await lane.put(job)
        else:
            lane.offer(job)

    def on_lost(self) -> None:
        if self._segment_lane is not None:
            self._segment_lane.cut()  # emit the frames before the loss now

    def _save_jpeg(self, jpeg: EncodedJpeg) -> Awaitable[MediaRef]:
        facts = {
            "pts": round(jpeg.pts, 6),
            "captured_at": jpeg.captured_at,
            "width": jpeg.width,
            "height": jpeg.height,
            "codec": "jpeg",
        }
        return self.images.save(jpeg.data, "image/jpeg", jpeg.epoch, facts)

    def _save_segment(self, segment: EncodedSegment) -> Awaitable[MediaRef]:
        facts = {
            "pts": round(segment.pts, 6),
            "duration": round(segment.duration, 6),
            "captured_at": segment.captured_at,
            "width": segment.width,
            "height": segment.height,
            "codec": segment.codec,
            "fps": segment.fps,
            "frames": segment.frames,
        }
        return self.segments.save(segment.data, segment.media_type, segment.epoch, facts)
