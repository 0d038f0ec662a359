"""A camera's encoded frames and its microphone's Opus sound, handed to each WebRTC viewer.

One :class:`VideoFanout` per watched feed listens to it once
(:meth:`~mediaflow.live.hub.LiveFeed.listen`) and cuts each H.264 frame into RTP
payloads (the parameter sets before every keyframe, so a viewer can start at any of
them) as one :class:`~mediaflow.live.rtp.RtpFrame` on the 90 kHz clock: made once,
shared by every viewer, never decoded or encoded again. One :class:`OpusFanout` per
watched sound encodes it to Opus once, on a thread of its own, while at least one
viewer listens (:class:`~mediaflow.live.opus.OpusEncoder`), and shares the packets
the same way: a chunk's packets as one :class:`~mediaflow.live.rtp.RtpFrame`
(:func:`~mediaflow.live.opus.sound_runs`), which a viewer's sender sends in one go.
The sound is a microphone's (:class:`MicrophoneOpus`, the camera's ``live_audio``) or
a copied camera's own AAC, decoded first on that thread (:class:`CameraOpus`).

Each viewer has a :class:`ViewerQueue`: bounded, with a named policy
(:func:`admit`). Video that finds it full is dropped up to the next keyframe (a
viewer that fell behind jumps to live at the next group of pictures, never decodes a
frame whose reference it missed); so is video after :meth:`ViewerQueue.restart` (the
viewer asked for a keyframe, RTCP PLI/FIR, and the live path cannot make one on
demand: the camera's own encoder sets its groups of pictures). Sound that finds it
full drops what waits. :meth:`ViewerQueue.stalled` says when a viewer has not taken
anything for a while although something waits: the session drops such a viewer.

Use from the event loop that owns the feed; nothing here blocks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from typing import Any, TypeVar, assert_never

import av

from mediaflow.live.audio import AacDecoder, Pcm
from mediaflow.live.fmp4 import AudioTrack
from mediaflow.live.h264 import NAL_AUD, NAL_PPS, NAL_SPS, BitstreamError, nal_type, split_annexb
from mediaflow.live.hub import LiveFeed
from mediaflow.live.opus import OpusEncoder, sound_runs
from mediaflow.live.parts import AudioFrame, VideoFrame
from mediaflow.live.rtp import RtpFrame, h264_payloads
from mediaflow.live.sound import LiveSound

log = logging.getLogger("mediaflow.live.webrtc")

VIDEO_CLOCK = Fraction(1, 90000)  # RTP's H.264 clock (RFC 6184 §8.2.1)
# Waiting for one viewer's sender, which takes all that waits at once: more than two
# seconds of 30 fps video, or 30 microphone chunks (each chunk's Opus packets are
# one item: 3 s of 100 ms chunks), means it stopped taking.
VIDEO_QUEUE_FRAMES = 60
AUDIO_QUEUE_CHUNKS = 30
OPUS_PENDING_CHUNKS = 32  # microphone chunks waiting for the Opus thread: then dropped
_LEFT_OUT = frozenset({NAL_SPS, NAL_PPS, NAL_AUD})


class QueueClosed(Exception):
    """The viewer's queue was closed: its session ended."""


class Admit(enum.Enum):
    TAKE = "take"
    DROP = "drop"  # this one only
    FLUSH = "flush"  # this one and everything waiting; video then waits for a keyframe


def admit(*, depth: int, capacity: int, keyframe: bool, waiting_keyframe: bool) -> Admit:
    """What a viewer's queue does with the next item. Pure.

    An item that finds the queue full flushes it: what waits is older than live by
    the whole queue. Video then waits for its next keyframe (``waiting_keyframe``)
    and drops everything before it; sound items are all "keyframes"."""
    if depth >= capacity:
        return Admit.FLUSH
    if waiting_keyframe and not keyframe:
        return Admit.DROP
    return Admit.TAKE


class ViewerQueue:
    """One viewer's hand-off (module doc): the fanout offers, the viewer's sender takes."""

    def __init__(self, capacity: int, *, video: bool) -> None:
        self.capacity = capacity
        self.video = video
        self.waiting_keyframe = video  # a new viewer starts at a keyframe
        self.offered = 0
        self.taken = 0
        self.dropped = 0
        self.restarts = 0  # keyframes asked for (RTCP PLI/FIR)
        self.max_depth = 0
        self.taken_at = time.monotonic()
        self._items: deque[Any] = deque()
        self._ready = asyncio.Event()
        self._closed = False

    def offer(self, item: Any, *, keyframe: bool) -> None:
        """Queue ``item`` by :func:`admit`; never blocks, never grows past ``capacity``."""
        if self._closed:
            return
        self.offered += 1
        decision = admit(
            depth=len(self._items),
            capacity=self.capacity,
            keyframe=keyframe,
            waiting_keyframe=self.waiting_keyframe,
        )
        match decision:
            case Admit.TAKE:
                pass
            case Admit.DROP:
                self.dropped += 1
                return
            case Admit.FLUSH:
                self.dropped += len(self._items)
                self._items.clear()
                self.waiting_keyframe = self.video
                if self.video and not keyframe:
                    self.dropped += 1
                    return
            case _:
                assert_never(decision)
        self.waiting_keyframe = False
        self._items.append(item)
        self.max_depth = max(self.max_depth, len(self._items))
        self._ready.set()

    async def take_all(self) -> list[Any]:
        """Everything waiting, oldest first; waits for at least one item. Raises
        :class:`QueueClosed` once closed."""
        while not self._items:
            if self._closed:
                raise QueueClosed
            self._ready.clear()
            await self._ready.wait()
        items = list(self._items)
        self._items.clear()
        self.taken += len(items)
        self.taken_at = time.monotonic()
        return items

    def restart(self) -> None:
        """Drop what waits and go on at the next keyframe (the viewer lost a picture)."""
        self.restarts += 1
        if self.video:
            self.dropped += len(self._items)
            self._items.clear()
            self.waiting_keyframe = True

    def stalled(self, now: float, limit_s: float) -> bool:
        """Whether something waits and nothing was taken for ``limit_s``."""
        return bool(self._items) and now - self.taken_at > limit_s

    @property
    def depth(self) -> int:
        return len(self._items)

    def close(self) -> None:
        self._closed = True
        self._items.clear()
        self._ready.set()


def access_unit(parameter_sets: list[bytes], frame: VideoFrame) -> list[bytes]:
    """``frame``'s NAL units as a viewer gets them: a keyframe behind the
    ``parameter_sets`` (the feed's SPS and PPS) so a decoder can start there, without
    delimiters and without the parameter sets a frame may carry in-band (sent once,
    up front). Raises :class:`~mediaflow.live.h264.BitstreamError` for a malformed
    sample."""
    sample = frame.as_sample()
    nals = list(parameter_sets) if frame.keyframe else []
    position = 0
    while position < len(sample):
        if position + 4 > len(sample):
            raise BitstreamError("a NAL length runs past the end of the sample")
        size = int.from_bytes(sample[position : position + 4], "big")
        nal = sample[position + 4 : position + 4 + size]
        if size == 0 or len(nal) != size:
            raise BitstreamError("a NAL length runs past the end of the sample")
        if nal_type(nal) not in _LEFT_OUT:
            nals.append(nal)
        position += 4 + size
    return nals


class Fanout:
    """What the registry and the sessions see of a fanout: its viewers' queues."""

    def __init__(self) -> None:
        self.viewers: set[ViewerQueue] = set()

    def leave(self, queue: ViewerQueue) -> None:
        queue.close()
        self.viewers.discard(queue)

    def close(self) -> None:
        for queue in list(self.viewers):
            self.leave(queue)


F = TypeVar("F", bound=Fanout)


class VideoFanout(Fanout):
    """One feed's frames to its viewers (module doc)."""

    def __init__(self, feed: LiveFeed) -> None:
        super().__init__()
        self.feed = feed
        self.frames = 0  # access units made (once each, whatever the number of viewers)
        self.malformed = 0
        self._origin: float | None = None
        self._extradata: tuple[bytes, list[bytes]] = (b"", [])  # as given, and its NAL units
        self._stop = feed.listen(self._take)

    def join(self) -> ViewerQueue:
        queue = ViewerQueue(VIDEO_QUEUE_FRAMES, video=True)
        self.viewers.add(queue)
        return queue

    def close(self) -> None:
        self._stop()
        super().close()

    def _take(self, extradata: bytes, frame: VideoFrame) -> None:
        if not self.viewers or (self._origin is None and not frame.keyframe):
            return
        try:
            if extradata != self._extradata[0]:
                self._extradata = (extradata, split_annexb(extradata))
            payloads = h264_payloads(access_unit(self._extradata[1], frame))
        except (BitstreamError, ValueError):
            self.malformed += 1
            return
        if self._origin is None:
            self._origin = frame.time_s
        # RTP carries presentation times: a camera's B-frames show ``offset_s`` later.
        ticks = round((frame.time_s + frame.offset_s - self._origin) / VIDEO_CLOCK)
        item = RtpFrame(payloads, ticks, frame.keyframe)
        self.frames += 1
        for queue in self.viewers:
            queue.offer(item, keyframe=frame.keyframe)


class OpusFanout(Fanout):
    """Sound encoded to Opus once, on a thread of its own, while viewers listen (module
    doc): :class:`MicrophoneOpus` and :class:`CameraOpus` say where it comes from."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.encoded = 0  # Opus packets made (once each, whatever the number of viewers)
        self.dropped = 0  # chunks left out: the encoder fell behind
        self.failed: str | None = None
        self._encoder = OpusEncoder()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"opus {name}")
        self._pending = 0
        self._loop = asyncio.get_running_loop()

    def join(self) -> ViewerQueue:
        queue = ViewerQueue(AUDIO_QUEUE_CHUNKS, video=False)
        self.viewers.add(queue)
        return queue

    def close(self) -> None:
        super().close()
        self._thread.shutdown(wait=False, cancel_futures=True)

    def _encode_soon(self, work: Callable[..., list[tuple[int, bytes]]], *args: Any) -> None:
        """Run ``work(*args)`` (it returns Opus packets) on the encoder's thread, then
        hand its packets to the viewers; dropped while nobody listens or too much waits."""
        if not self.viewers or self.failed is not None:
            return
        if self._pending >= OPUS_PENDING_CHUNKS:
            self.dropped += 1
            return
        self._pending += 1
        future = self._loop.run_in_executor(self._thread, work, *args)
        future.add_done_callback(self._hand_out)

    def _hand_out(self, future: asyncio.Future[list[tuple[int, bytes]]]) -> None:
        self._pending -= 1
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            self.failed = str(error)
            log.warning("WebRTC sound of %s stops: %s", self.name, error)
            return
        packets = future.result()
        self.encoded += len(packets)
        for item in sound_runs(packets):
            for queue in self.viewers:
                queue.offer(item, keyframe=True)


class MicrophoneOpus(OpusFanout):
    """A microphone's chunks (its :class:`~mediaflow.live.sound.LiveSound`), to Opus."""

    def __init__(self, sound: LiveSound) -> None:
        super().__init__(sound.name)
        self.sound = sound
        sound.listeners.append(self._take)

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.sound.listeners.remove(self._take)
        super().close()

    def _take(self, pcm: Pcm, rate: int, channels: int, captured_at: float) -> None:
        self._encode_soon(self._encoder.encode, pcm, rate, channels)


class CameraOpus(OpusFanout):
    """A copied camera's own sound (its AAC frames, :meth:`LiveFeed.listen_sound`),
    decoded and encoded to Opus once on the encoder's thread. A frame FFmpeg cannot
    decode is left out and counted (``malformed``); the sound goes on."""

    def __init__(self, feed: LiveFeed, name: str) -> None:
        super().__init__(name)
        self.malformed = 0
        self._decoder: AacDecoder | None = None
        self._stop = feed.listen_sound(self._take)

    def close(self) -> None:
        self._stop()
        super().close()

    def _take(self, track: AudioTrack, frame: AudioFrame) -> None:
        self._encode_soon(self._transcode, track, frame.data)

    def _transcode(self, track: AudioTrack, data: bytes) -> list[tuple[int, bytes]]:
        if self._decoder is None or self._decoder.track != track:
            self._decoder = AacDecoder(track)
        try:
            pcm = self._decoder.decode(data)
        except av.FFmpegError:
            self.malformed += 1
            return []
        if not len(pcm):
            return []  # the decoder primes
        return self._encoder.encode(pcm, track.sample_rate, track.channels)


class FanoutRegistry:
    """The fanouts of the feeds and microphones being watched, made on the first
    viewer and closed with the last (:meth:`release`)."""

    def __init__(self) -> None:
        self.video: dict[int, VideoFanout] = {}
        self.sound: dict[int, OpusFanout] = {}  # by microphone, or by a camera's own sound

    def video_of(self, feed: LiveFeed) -> VideoFanout:
        if id(feed) not in self.video:
            self.video[id(feed)] = VideoFanout(feed)
        return self.video[id(feed)]

    def sound_of(self, sound: LiveSound) -> OpusFanout:
        if id(sound) not in self.sound:
            self.sound[id(sound)] = MicrophoneOpus(sound)
        return self.sound[id(sound)]

    def own_sound_of(self, feed: LiveFeed, name: str) -> OpusFanout:
        """The Opus of a copied camera's own sound (``name``: its flow and node)."""
        if id(feed) not in self.sound:
            self.sound[id(feed)] = CameraOpus(feed, name)
        return self.sound[id(feed)]

    def all(self) -> list[Fanout]:
        return [*self.video.values(), *self.sound.values()]

    def release(self) -> None:
        """Close the fanouts nobody watches any more."""
        _release(self.video, everyone=False)
        _release(self.sound, everyone=False)

    def close(self) -> None:
        _release(self.video, everyone=True)
        _release(self.sound, everyone=True)


def _release(table: dict[int, F], *, everyone: bool) -> None:
    for key, fanout in list(table.items()):
        if everyone or not fanout.viewers:
            fanout.close()
            del table[key]
