"""Emitting a video source: JPEGs at ``fps`` on ``image``, segments on ``video``.

The decoding run of the camera, file and URL connectors (a source whose pictures are
copied is :mod:`connectors._copy_run`'s). The capture loop runs on the event loop
and does no pixel work: for each captured frame it decides whether a JPEG is due
(one per ``1/fps`` of source time) and whether segments are wanted, and hands the frame
to an encoding lane (:mod:`connectors._lanes`) for each. When a lane is full the frame
is skipped there, at the capture edge, counted and reported (``frames_skipped``
events, :meth:`VideoRun.statistics`); a file replayed with ``realtime = false`` waits
instead, losing nothing. MJPEG passthrough: a camera's JPEG bytes are emitted as
they are, and decoded only when a segment needs the pixels.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import av

from connectors._jpeg import JpegEncoder, make_jpeg_encoder
from connectors._lanes import EncodeLane
from connectors._options import encode_codec
from connectors._reconnect import Reconnect
from connectors._segments import DEFAULT_FPS, EncodedSegment, SegmentEncoder, SegmentJob
from connectors._timeline import Epoch
from connectors._together import run_together
from connectors._video_ports import (
    JPEG_RESULTS_S,
    EncodedJpeg,
    JpegPacer,
    VideoPortsRun,
    lane_capacity,
)
from devices import CapturedFrame
from devices.video_input import DecodedVideo

# How long a lane's hand-off may hold frames, queued or being encoded, before the
# capture edge skips. A stall shorter than this (another thread holding the GIL, a
# segment's encoder being flushed and the next one opened, ~0.1-0.2 s) delays
# frames instead of losing them; a longer one is a lane that cannot keep up, and
# waiting longer would only grow memory (a 720p frame is 1.4 MB).
JPEG_LANE_S = 0.25
SEGMENT_LANE_S = 0.5


@dataclass(frozen=True)
class JpegJob:
    frame: av.VideoFrame | None
    packet: bytes | None
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


class VideoRun(VideoPortsRun[DecodedVideo]):
    """One run of a decoded video source: capture loop, two lanes, two emitters."""

    # Set by run(); a run is used once.
    _pacer: JpegPacer | None = None
    _capture_dropped = 0  # frames the device bridges of closed inputs dropped
    _open_input: DecodedVideo | None = None
    _jpeg_lane: EncodeLane[JpegJob, EncodedJpeg] | None = None
    _segment_lane: EncodeLane[SegmentJob, EncodedSegment] | None = None

    async def run(
        self,
        first: DecodedVideo,
        *,
        policy: Reconnect,
        reopen: Callable[[], Awaitable[DecodedVideo]],
    ) -> None:
        """Emit until the source ends (a file) or the flow stops. Raises the source's
        or an encoder's error."""
        info = first.info
        self._pacer = JpegPacer(self.options.fps, 1.0 / (info.fps or DEFAULT_FPS))
        self._lossless = not info.is_live and self.request.realtime is False
        resize = self.request.resize
        jpeg_rate = min(info.fps or DEFAULT_FPS, self.options.fps)
        if self.options.image is not False:  # decoded anyway: JPEGs cost only the encode
            self._jpeg_lane = EncodeLane(
                f"jpeg {self.device}",
                JpegWork(make_jpeg_encoder(self.options.quality, resize), resize),
                capacity=lane_capacity(JPEG_LANE_S, info.fps, 2),
                results=lane_capacity(JPEG_RESULTS_S, jpeg_rate, 2),
            )
        tap = None
        if self.wants_video():
            # Live view reads the H.264 the segments are made of: no second encode.
            codec = encode_codec(self.options.codec)
            if codec == "h264":
                tap = self.ctx.more.live.open_feed(
                    self.ctx.flow,
                    self.ctx.node,
                    self.options.live_audio,
                    part_s=self.options.live_part_s,
                    keyframe_s=self.options.segment_s,
                ).tap
            encoder = SegmentEncoder(
                codec, self.options.segment_s, fps=info.fps, size=resize, tap=tap
            )
            self._segment_lane = EncodeLane(
                f"segments {self.device}",
                encoder,
                capacity=lane_capacity(SEGMENT_LANE_S, info.fps, 8),
            )
        lanes = [lane for lane in (self._jpeg_lane, self._segment_lane) if lane is not None]
        capture = self.capture(first, lanes, policy=policy, reopen=reopen)
        try:
            await run_together(capture, *self.emitters(self._jpeg_lane, self._segment_lane))
        finally:
            if tap is not None:
                self.ctx.more.live.drop(self.ctx.flow, self.ctx.node, tap)  # nothing live here now
            for lane in lanes:
                await lane.close()
            self.skips.update(self.skipped(), force=True)

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

    async def consume(self, source: DecodedVideo) -> None:
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
        assert self._pacer is not None
        if self._jpeg_lane is not None and self._pacer.due(pts):
            job = JpegJob(
                item.frame, item.packet, pts, item.captured_at, item.width, item.height, epoch
            )
            await self.send(self._jpeg_lane, job)
        if self._segment_lane is not None:
            segment_job = SegmentJob(item.frame, item.packet, pts, item.captured_at, epoch)
            await self.send(self._segment_lane, segment_job)

    def on_lost(self) -> None:
        if self._segment_lane is not None:
            self._segment_lane.cut()  # emit the frames before the loss now
