"""Emitting a source whose video is copied: segments of its own packets, JPEGs on demand.

The copying twin of :class:`connectors._video.VideoRun`, for a
:class:`~devices.PacketInput` (an IP camera's H.264 or H.265). The capture loop runs
on the event loop and does no media work: each packet goes to the segment lane
(:mod:`connectors._copy_segments`: muxed as it is, with the source's sound, and to
the live view), and the video packets :class:`~connectors._copy_pictures.PictureChooser`
picks go to the picture lane (decoded, the due ones encoded as JPEG). Segments are
made while a node reads ``video`` (or ``video = true``), JPEGs while a node reads
``image`` (or ``image = true``): a copied camera nobody looks at decodes nothing.

A lane that cannot keep up skips packets at the capture edge, counted and reported
like skipped frames (``frames_skipped``). Skipping one picture of a group would
corrupt the rest of it, so the segment lane skips from the packet it refused to the
next keyframe and starts a new segment there, after a marked gap.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from connectors._copy_jobs import PacketJob
from connectors._copy_pictures import PictureChooser, PictureJob, PictureWork
from connectors._copy_segments import PacketSegmenter
from connectors._jpeg import make_jpeg_encoder
from connectors._lanes import EncodeLane
from connectors._reconnect import Reconnect
from connectors._segments import DEFAULT_FPS, EncodedSegment
from connectors._timeline import Epoch
from connectors._together import run_together
from connectors._video_ports import (
    JPEG_RESULTS_S,
    EncodedJpeg,
    VideoPortsRun,
    lane_capacity,
)
from connectors._video_request import wanted
from devices import CapturedPacket, PacketInput
from mediaflow.live.hub import HUB, LiveFeed

log = logging.getLogger(__name__)

# Packets a lane may hold before the capture edge skips. Copying costs microseconds a
# packet, so only a stalled lane (its saves held up by a slow disk) ever fills these;
# a second of a 30 fps camera with 48 kHz AAC is ~80 packets.
SEGMENT_LANE_S = 4.0
PICTURE_LANE_S = 1.0
SOUND_PACKETS_PER_S = 50  # AAC at 48 kHz: 47 frames a second


class PacketRun(VideoPortsRun[PacketInput]):
    """One run of a copied source: capture loop, up to two lanes and their emitters."""

    # Set by run(); a run is used once.
    _chooser: PictureChooser | None = None
    _pictures: EncodeLane[PictureJob, EncodedJpeg] | None = None
    _segment_lane: EncodeLane[PacketJob, EncodedSegment] | None = None
    _picture_work: PictureWork | None = None
    _open_input: PacketInput | None = None
    _refused_video = False  # the segment lane refused a picture: wait for a keyframe
    _last_video_pts: float | None = None
    _skipped_closed = 0  # packets the device bridges of closed inputs skipped
    _skipped_jpeg = 0
    _skipped_video = 0

    def wants_image(self) -> bool:
        return wanted(self.ctx, "image", self.options.image)

    async def run(
        self,
        first: PacketInput,
        *,
        policy: Reconnect,
        reopen: Callable[[], Awaitable[PacketInput]],
    ) -> None:
        """Emit until the source ends (a file) or the flow stops. Raises the source's
        or a lane's error."""
        info = first.info
        fps = info.fps or DEFAULT_FPS
        self._lossless = not info.is_live and self.request.realtime is False
        lanes: list[EncodeLane[Any, Any]] = []
        if self.wants_image():
            self._chooser = PictureChooser(self.options.fps, 1.0 / fps)
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
            segmenter = PacketSegmenter(
                self.options.segment_s,
                sound=first.has_audio,
                feed=feed,
                live_sound=feed is not None and self._own_sound_live(first),
            )
            packet_rate = fps + (SOUND_PACKETS_PER_S if first.has_audio else 0)
            self._segment_lane = EncodeLane(
                f"segments {self.device}",
                segmenter,
                capacity=lane_capacity(SEGMENT_LANE_S, packet_rate, 16),
            )
            lanes.append(self._segment_lane)
        capture = self.capture(first, lanes, policy=policy, reopen=reopen)
        try:
            await run_together(capture, *self.emitters(self._pictures, self._segment_lane))
        finally:
            if feed is not None:
                HUB.drop(self.ctx.flow, self.ctx.node, feed)
            for lane in lanes:
                await lane.close()
            self.skips.update(self.skipped(), force=True)

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
        return HUB.open_feed(
            self.ctx.flow,
            self.ctx.node,
            sound_from,
            own_sound=self._own_sound_live(source),
            part_s=self.options.live_part_s,
            keyframe_s=self.options.segment_s,
        )

    async def consume(self, source: PacketInput) -> None:
        self._open_input = source
        epoch: Epoch | None = None
        video_skips = 0
        try:
            async for packet in source:
                if self.ctx.stopping():
                    return
                if epoch is None:
                    epoch = self.timeline.begin()
                if source.video_skips != video_skips and packet.media == "video":
                    # The device bridge skipped pictures, up to this keyframe: a marked gap.
                    video_skips = source.video_skips
                    epoch = self._split(epoch, packet.pts_s + epoch.offset)
                epoch = await self._hand_off(packet, epoch, source)
                self.skips.update(self.skipped())
        finally:
            self._skipped_closed += source.skipped
            self._open_input = None

    async def _hand_off(self, packet: CapturedPacket, epoch: Epoch, source: PacketInput) -> Epoch:
        """Give ``packet`` to the lanes that want it; the epoch the next packet is in."""
        pts = packet.pts_s + epoch.offset
        video = packet.media == "video"
        if video:
            self.timeline.seen(pts, packet.duration_s)
            epoch = self._after_refusal(packet, pts, epoch)
        if self._segment_lane is not None and not (video and self._refused_video):
            job = PacketJob(packet, pts, epoch, source.templates)
            if not await self.send(self._segment_lane, job):
                self._skipped_video += 1
                self._refused_video = self._refused_video or video
        if video and self._pictures is not None and self._chooser is not None:
            choice = self._chooser.choose(pts, packet.keyframe)
            if choice is not None:
                picture = PictureJob(packet, pts, epoch, source.templates, choice)
                if not await self.send(self._pictures, picture):
                    self._skipped_jpeg += 1
                    self._chooser.broken()
        if video:
            self._last_video_pts = pts
        return epoch

    def _after_refusal(self, packet: CapturedPacket, pts: float, epoch: Epoch) -> Epoch:
        """After the segment lane refused a picture, its group is lost: skip to the next
        keyframe, which starts a new epoch (a marked gap, a new segment)."""
        if not self._refused_video:
            return epoch
        if not packet.keyframe:
            self._skipped_video += 1
            return epoch
        self._refused_video = False
        return self._split(epoch, pts)

    def _split(self, epoch: Epoch, pts: float) -> Epoch:
        """A new epoch at ``pts`` after pictures were skipped since the last one handed on."""
        gap = pts - (self._last_video_pts if self._last_video_pts is not None else pts)
        return self.timeline.split(epoch, max(0.0, gap))

    def skipped(self) -> dict[str, int]:
        """Packets skipped so far: at capture (the device bridge) and per lane."""
        capture = self._skipped_closed
        if self._open_input is not None:
            capture += self._open_input.skipped
        return {"capture": capture, "jpeg": self._skipped_jpeg, "video": self._skipped_video}

    def statistics(self) -> dict[str, Any]:
        """Emitted, decoded and skipped counts, for metrics and tests."""
        lane = self._segment_lane
        work = self._picture_work
        return {
            "images": self.images.emitted,
            "segments": self.segments.emitted,
            "segment_packets": lane.statistics().accepted if lane is not None else 0,
            "decoded": work.decoded if work is not None else 0,
            "skipped": self.skipped(),
            "copied": True,
        }

    def on_lost(self) -> None:
        if self._segment_lane is not None:
            self._segment_lane.cut()  # emit the packets before the loss now
