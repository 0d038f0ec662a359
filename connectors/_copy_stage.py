"""The copy pipeline's work on the camera's own thread: timing, segments, the live view.

A copied camera's packets are cheap to handle (microseconds each), and there are ~80
of them a second; handing each to the event loop and on to a lane cost more than the
work itself, and the hand-offs of many cameras fought over the interpreter. So the
:class:`CopyStage` of one input runs on that input's producer thread
(:meth:`devices.PacketInput.attach`) and does, packet by packet:

- the source's timeline: the input's epoch, and where the source has got to;
- the segments (:class:`~connectors._copy_segments.PacketSegmenter`, which also feeds
  the live view), handed to the event loop's emitter through a bounded bridge: a
  live source never waits for it (a segment that finds it full is left out, counted),
  a file replayed as fast as possible does (lossless);
- which pictures the ``image`` port needs decoded
  (:class:`~connectors._copy_pictures.PictureChooser`): only those cross to the event
  loop, which hands them to the picture lane.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from connectors._copy_jobs import PacketJob
from connectors._copy_pictures import PictureChooser, PictureJob
from connectors._copy_segments import PacketSegmenter
from connectors._segments import EncodedSegment
from connectors._timeline import Epoch, Timeline
from devices import BridgeOverflow, CapturedPacket, FrameBridge, StreamTemplates

log = logging.getLogger(__name__)


@dataclass
class CopyCounts:
    """What the stages of one run did; each count has one writer at a time (the thread
    of the input being read), and the event loop reads them."""

    packets: int = 0  # packets the segmenter took
    segments_left_out: int = 0  # segments the emitter had no room for (live only)
    frames_left_out: int = 0  # their frames


class CopyStage:
    """One input's packets, on its producer thread (see the module doc). Not
    thread-safe: one thread calls :meth:`take` and :meth:`finish`."""

    def __init__(
        self,
        *,
        timeline: Timeline,
        templates: StreamTemplates,
        segmenter: PacketSegmenter | None,
        segments_out: FrameBridge[EncodedSegment] | None,
        chooser: PictureChooser | None,
        pictures: Callable[[PictureJob], None] | None,
        counts: CopyCounts,
    ) -> None:
        """``segments_out`` takes finished segments (policy ``"fail"``: a live source;
        ``"block"``: lossless); ``pictures`` takes the packets to decode (it may block
        for a lossless source)."""
        self.timeline = timeline
        self.templates = templates
        self.segmenter = segmenter
        self.segments_out = segments_out
        self.chooser = chooser
        self.pictures = pictures
        self.counts = counts
        self._epoch: Epoch | None = None

    def take(self, packet: CapturedPacket) -> None:
        if self._epoch is None:
            self._epoch = self.timeline.begin()
        epoch = self._epoch
        pts = packet.pts_s + epoch.offset
        video = packet.media == "video"
        if video:
            self.timeline.seen(pts, packet.duration_s)
        if self.segmenter is not None:
            self.counts.packets += 1
            self._hand_on(self.segmenter.push(PacketJob(packet, pts, epoch, self.templates)))
        if video and self.chooser is not None and self.pictures is not None:
            choice = self.chooser.choose(pts, packet.keyframe)
            if choice is not None:
                self.pictures(PictureJob(packet, pts, epoch, self.templates, choice))

    def finish(self) -> None:
        if self.segmenter is not None:
            self._hand_on(self.segmenter.flush())

    def _hand_on(self, segments: list[EncodedSegment]) -> None:
        if self.segments_out is None:
            return
        for segment in segments:
            try:
                self.segments_out.put(segment)
            except BridgeOverflow:
                # The store has held the emitter up for several segments: capture goes
                # on, and this segment is counted as skipped instead of waiting.
                self.counts.segments_left_out += 1
                self.counts.frames_left_out += segment.frames


def offer_from_thread(
    loop: asyncio.AbstractEventLoop, offer: Callable[[PictureJob], None]
) -> Callable[[PictureJob], None]:
    """``offer`` run on ``loop``, called from another thread without waiting."""

    def hand_over(job: PictureJob) -> None:
        loop.call_soon_threadsafe(offer, job)

    return hand_over


def put_from_thread(
    loop: asyncio.AbstractEventLoop, put: Callable[[PictureJob], Coroutine[Any, Any, None]]
) -> Callable[[PictureJob], None]:
    """``put`` awaited on ``loop``, called from another thread that waits for it."""

    def hand_over(job: PictureJob) -> None:
        asyncio.run_coroutine_threadsafe(put(job), loop).result()

    return hand_over
