"""What the two video runs share: the ``image`` and ``video`` ports and their lanes.

:class:`VideoPortsRun` is the base of :class:`connectors._video.VideoRun` (a source
decoded frame by frame) and :class:`connectors._copy_run.PacketRun` (a source whose
packets are copied): the two emitters and their saves with the capture facts, the
``frames_skipped`` report, the capture loop's supervision (reconnects) and the
hand-off to a lane, which waits (files replayed as fast as possible: lossless) or
skips at the capture edge (live sources).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from connectors._emit import CounterReport, PortEmitter, Results, emit_lane
from connectors._lanes import EncodeLane
from connectors._reconnect import Input, Reconnect, SourceRun
from connectors._segments import DEFAULT_FPS, EncodedSegment
from connectors._timeline import Epoch, Resume
from connectors._video_request import VideoOptions, VideoRequest, wanted
from mediaflow import Context, MediaRef

InputT = TypeVar("InputT", bound=Input)

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
class EncodedJpeg:
    data: bytes
    pts: float
    captured_at: float
    width: int
    height: int
    epoch: Epoch


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

    @property
    def next_due(self) -> float | None:
        """When the next JPEG is due (None before the first)."""
        return self._due

    def due(self, pts: float) -> bool:
        """Whether the frame at ``pts`` becomes a JPEG (it then moves the schedule on)."""
        if self._due is not None and pts < self._due - self.tolerance:
            return False
        self._due = (self._due if self._due is not None else pts) + self.period
        if self._due <= pts:
            self._due = pts + self.period
        return True


class VideoPortsRun(SourceRun[InputT]):
    """One run of a video source's ports (see the module doc); subclasses make the
    lanes and the capture loop (``consume``)."""

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
        self._lossless = False  # a file replayed as fast as possible: lanes wait

    def wants_video(self) -> bool:
        """``video`` option, else whether any node reads the ``video`` port."""
        return wanted(self.ctx, "video", self.options.video)

    def emitters(
        self,
        jpegs: Results[EncodedJpeg] | None,
        segments: Results[EncodedSegment] | None,
    ) -> list[Coroutine[Any, Any, None]]:
        """The tasks that save and publish what the lanes make, in order."""
        out = []
        if jpegs is not None:
            out.append(
                emit_lane(jpegs, self._save_jpeg, self.images.publish, ahead=JPEG_SAVES_AHEAD)
            )
        if segments is not None:
            out.append(emit_lane(segments, self._save_segment, self.segments.publish))
        return out

    async def capture(
        self,
        first: InputT,
        lanes: list[EncodeLane[Any, Any]],
        *,
        policy: Reconnect,
        reopen: Callable[[], Awaitable[InputT]],
    ) -> None:
        """Consume the source across reconnects; then no more jobs for ``lanes``."""
        try:
            await self.supervise(first, policy=policy, reopen=reopen)
        finally:
            for lane in lanes:
                lane.finish()  # the emitters drain what is left, then return

    async def send(self, lane: EncodeLane[Any, Any], job: object) -> bool:
        """Hand ``job`` to ``lane``: wait for room when lossless, else skip it when the
        lane is full (False)."""
        if self._lossless:
            await lane.put(job)
            return True
        return lane.offer(job)

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
        return self.segments.save(
            segment.data, segment.media_type, segment.epoch, segment_facts(segment)
        )


def segment_facts(segment: EncodedSegment) -> dict[str, Any]:
    """A segment's own meta: where it is in the source, how long, what it holds."""
    facts: dict[str, Any] = {
        "pts": round(segment.pts, 6),
        "duration": round(segment.duration, 6),
        "captured_at": segment.captured_at,
        "width": segment.width,
        "height": segment.height,
        "codec": segment.codec,
        "fps": segment.fps,
        "frames": segment.frames,
    }
    if segment.copied:
        facts["copied"] = True  # the source's own packets
        facts["audio_codec"] = segment.audio_codec
    return facts
