"""Packets on their way to a segment: one job per packet, put in one time order.

A copied source's video and sound arrive each in its own order, and not quite
together (a camera sends sound a little ahead of or behind its pictures; encoded
sound comes out of its encoder later still). :class:`Interleaver` puts them in one
order, so the sound that plays before a keyframe goes into the segment that keyframe
ends. Pure.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from connectors._timeline import Epoch
from devices import CapturedPacket, StreamTemplates

# How long one medium may wait for the other before it is let through alone: a camera
# whose sound stopped must not hold its pictures (and segments) back for longer.
INTERLEAVE_S = 1.0


@dataclass(frozen=True)
class PacketJob:
    """One packet for the segment lane. ``pts``: its presentation time on the
    source's timeline (the input's time plus the epoch's offset)."""

    packet: CapturedPacket
    pts: float
    epoch: Epoch
    templates: StreamTemplates

    @property
    def order(self) -> float:
        """When it is decoded (video) or played (sound), on the input's clock."""
        packet = self.packet
        return packet.dts_s if packet.media == "video" else packet.pts_s


class Interleaver:
    """Video and sound jobs of one input in one time order. Pure.

    Each medium arrives in its own order; a job is let out once the other medium has
    reached its time (nothing earlier can come any more), or once its own medium has
    run ``max_wait_s`` ahead of it (the other one stalled). Without sound, video
    passes straight through.
    """

    def __init__(self, with_sound: bool, max_wait_s: float = INTERLEAVE_S) -> None:
        self.with_sound = with_sound
        self.max_wait_s = max_wait_s
        self._waiting: dict[str, deque[PacketJob]] = {"video": deque(), "audio": deque()}
        self._newest: dict[str, float] = {}

    def push(self, job: PacketJob) -> list[PacketJob]:
        """Take ``job``; the jobs now due, in time order."""
        media = job.packet.media
        if not self.with_sound:
            return [job] if media == "video" else []
        self._waiting[media].append(job)
        self._newest[media] = job.order
        return self._due()

    def flush(self) -> list[PacketJob]:
        """Everything still waiting, in time order."""
        out = self._due(everything=True)
        self._newest.clear()
        return out

    def _due(self, everything: bool = False) -> list[PacketJob]:
        video, audio = self._waiting["video"], self._waiting["audio"]
        out: list[PacketJob] = []
        while video or audio:
            if video and audio:
                # At the same time, the picture first: sound at a keyframe's time plays
                # after it, in the segment that keyframe starts.
                source = video if video[0].order <= audio[0].order else audio
            else:
                source = video or audio
                other = "audio" if source is video else "video"
                head = source[0].order
                passed = self._newest.get(other, float("-inf")) >= head
                stalled = self._newest[source[0].packet.media] - head > self.max_wait_s
                if not (everything or passed or stalled):
                    break
            out.append(source.popleft())
        return out
