"""Emitting a source whose video is copied: segments of its own packets, JPEGs on demand.

The copying twin of :class:`connectors._video.VideoRun`, for a
:class:`~devices.PacketInput` (an IP camera's H.264 or H.265). Each input's packets
are handled on its own producer thread by a :class:`~connectors._copy_stage.CopyStage`
(segments muxed as they come, with the source's sound, and fed to the live view);
the event loop sees only what crosses to it: finished segments, and the video
packets :class:`~connectors._copy_pictures.PictureChooser` picks for the picture
lane (decoded there, the due ones encoded as JPEG). Segments are made while a node
reads ``video`` (or ``video = true``), JPEGs while a node reads ``image`` (or
``image = true``): a copied camera nobody looks at decodes nothing.

When saving falls behind by :data:`SEGMENTS_WAITING` segments, or the picture lane
by a second of pictures, what does not fit is skipped at the capture edge, counted
and reported like skipped frames (``frames_skipped``): capture never waits for them.
A file replayed with ``realtime = false`` waits instead, losing nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from connectors._copy_pictures import PictureChooser, PictureJob, PictureWork
from connectors._copy_segments import PacketSegmenter
from connectors._copy_stage import CopyCounts, CopyStage, offer_from_thread, put_from_thread
from connectors._jpeg import make_jpeg_encoder
from connectors._lanes import EncodeLane
from connectors._reconnect import Reconnect
from connectors._segments import DEFAULT_FPS, EncodedSegment
from connectors._together import run_together
from connectors._video_ports import (
    JPEG_RESULTS_S,
    EncodedJpeg,
    VideoPortsRun,
    lane_capacity,
)
from connectors._video_request import wanted
from devices import EndOfStream, FrameBridge, PacketInput, Policy
from mediaflow.live.hub import LiveFeed

log = logging.getLogger(__name__)

# Finished segments waiting for their save: a disk stalled this long (16 s of 4 s
# segments) costs a segment, never the capture; each is a few megabytes at most.
SEGMENTS_WAITING = 4
PICTURE_LANE_S = 1.0  # pictures chosen for decoding, waiting for the picture lane
STOP_POLL_S = 0.25  # how often a reading run looks whether the flow is stopping


class PacketRun(VideoPortsRun[PacketInput]):
    """One run of a copied source: a stage per input, the picture lane, two emitters."""

    # Set by run(); a run is used once.
    _chooser: PictureChooser | None = None
    _pictures: EncodeLane[PictureJob, EncodedJpeg] | None = None
    _picture_work: PictureWork | None = None
    _segments_out: FrameBridge[EncodedSegment] | None = None
    _segmenter: PacketSegmenter | None = None
    _skipped_jpeg = 0
    _counts: CopyCounts | None = None

    @property
    def counts(self) -> CopyCounts:
        """What the stages did so far (nothing before :meth:`run`)."""
        return self._counts if self._counts is not None else CopyCounts()

    def wants_image(self) -> bool:
        return wanted(self.ctx, "image", self.options.image)

    async def run(
        self,
        first: PacketInput,
        *,
        policy: Reconnect,
        reopen: Callable[[], Awaitable[PacketInput]],
    ) -> None:
        """Emit until the source ends (a file) or the flow stops. Raises the source's,
        a stage's or a lane's error."""
        info = first.info
        fps = info.fps or DEFAULT_FPS
        self._lossless = not info.is_live and self.request.realtime is False
        self._counts = CopyCounts()
        lanes: list[EncodeLane[Any, Any]] = []
        if self.wants_image():
            self._chooser = PictureChooser(
                self.options.fps, 1.0 / fps, first_group=not info.is_live
            )
            self._picture_work = PictureWork(make_jpeg_encoder(self.options.quality))
            self._pictures = EncodeLane(
                f"pictures {self.device}",
                self._picture_work,
                capacity=lane_capacity(PICTURE_LANE_S, fps, 4),
                results=lane_capacity(JPEG_RESULTS_S, min(fps, self.options.fps), 2),
            )
            lanes.append(self._pictures)
        feed = self._open_feed(first) if self.wants_video() else None
        if self.wants_video():
            self._segmenter = PacketSegmenter(
                self.options.segment_s,
                sound=first.has_audio,
                feed=feed,
                live_sound=feed is not None and self._own_sound_live(first),
            )
            out: Policy = "block" if self._lossless else "fail"
            self._segments_out = FrameBridge(SEGMENTS_WAITING, out)
        capture = self._capture_all(first, lanes, policy=policy, reopen=reopen)
        try:
            await run_together(capture, *self.emitters(self._pictures, self._segments_out))
        finally:
            if feed is not None:
                self.ctx.more.live.drop(self.ctx.flow, self.ctx.node, feed)
            for lane in lanes:
                await lane.close()
            if self._segments_out is not None:
                self._segments_out.close()
            self.skips.update(self.skipped(), force=True)

    async def _capture_all(
        self,
        first: PacketInput,
        lanes: list[EncodeLane[Any, Any]],
        *,
        policy: Reconnect,
        reopen: Callable[[], Awaitable[PacketInput]],
    ) -> None:
        try:
            await self.capture(first, lanes, policy=policy, reopen=reopen)
        finally:
            if self._segments_out is not None:
                self._segments_out.finish()  # the emitter drains the rest, then returns

    def _own_sound_live(self, source: PacketInput) -> bool:
        live_audio = self.options.live_audio
        return source.has_audio and live_audio in (None, self.ctx.node)

    def _open_feed(self, source: PacketInput) -> LiveFeed | None:
        """The live view of an H.264 camera (browsers do not play H.265 live)."""
        if source.templates.video_codec != "h264":
            log.info("%s: no live view of %s video", self.device, source.info.codec)
            return None
        live_audio = self.options.live_audio
        sound_from = None if live_audio in (None, self.ctx.node) else live_audio
        return self.ctx.more.live.open_feed(
            self.ctx.flow,
            self.ctx.node,
            sound_from,
            own_sound=self._own_sound_live(source),
            part_s=self.options.live_part_s,
            keyframe_s=self.options.segment_s,
        )

    async def consume(self, source: PacketInput) -> None:
        """Read ``source`` through a stage on its own thread until it ends or the flow
        stops; raises what it raised."""
        loop = asyncio.get_running_loop()
        pictures = None
        if self._pictures is not None:
            lane = self._pictures
            pictures = (
                put_from_thread(loop, lane.put)
                if self._lossless
                else offer_from_thread(loop, self._offer_picture)
            )
        source.attach(
            CopyStage(
                timeline=self.timeline,
                templates=source.templates,
                segmenter=self._segmenter,
                segments_out=self._segments_out,
                chooser=self._chooser,
                pictures=pictures,
                counts=self.counts,
            )
        )
        while not self.ctx.stopping():
            try:
                await asyncio.wait_for(source.read(), STOP_POLL_S)
            except TimeoutError:
                self.skips.update(self.skipped())
            except EndOfStream:
                return

    def _offer_picture(self, job: PictureJob) -> None:
        if self._pictures is not None and not self._pictures.offer(job):
            self._skipped_jpeg += 1
            if self._chooser is not None:
                self._chooser.broken()  # the rest of its group cannot be decoded

    def skipped(self) -> dict[str, int]:
        """Frames skipped so far: segments with no room to wait for their save (their
        frames), and pictures the picture lane had no room for."""
        return {"capture": 0, "jpeg": self._skipped_jpeg, "video": self.counts.frames_left_out}

    def statistics(self) -> dict[str, Any]:
        """Emitted, decoded and skipped counts, for metrics and tests."""
        work = self._picture_work
        return {
            "images": self.images.emitted,
            "segments": self.segments.emitted,
            "segment_packets": self.counts.packets,
            "segments_left_out": self.counts.segments_left_out,
            "decoded": work.decoded if work is not None else 0,
            "skipped": self.skipped(),
            "copied": True,
        }
