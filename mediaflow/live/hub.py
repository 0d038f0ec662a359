"""Live feeds of this process's cameras: the parts a player reads, kept in a small window.

A camera connector opens its feed with :meth:`LiveHub.open_feed` and hands it
every H.264 frame its segment encoder produces (on the encoding thread: the tap only
schedules the frame onto the event loop, so encoding never waits for a viewer). The
feed cuts frames into parts (:class:`~mediaflow.live.parts.PartCutter`) and keeps the
newest two groups of pictures and 2 s more, with the init segment built from the encoder's
parameter sets: memory is bounded by the window whatever the viewers do, and a viewer
that falls behind finds only newer parts, starting at a keyframe. The server in the
same process (``mediaflow run``) answers ``/live/...`` from the same hub: the session
makes one (:attr:`~mediaflow.engine.session.FlowSession.live`), hands it to its nodes
(``ctx.more.live``) and to the server beside it; a process without the camera has no feed
for it.

A feed may carry a microphone's sound (the camera's ``live_audio``): the microphone
hands its chunks to :meth:`LiveHub.sound`'s :class:`~mediaflow.live.sound.LiveSound`,
which encodes them while the feed is :attr:`LiveFeed.watched` (read within
``WATCH_S``) and fills silence otherwise. Such a feed has no init segment until both
the video's parameter sets and the sound's format are known.

Other live paths (WebRTC viewers, :mod:`mediaflow.live.fanout`) take the same encoded
frames as they arrive with :meth:`LiveFeed.listen`, on the feed's loop; the feed names
the microphone whose sound it carries in :attr:`LiveFeed.sound_from`, or hands the
camera's own sound to :meth:`LiveFeed.listen_sound` (:attr:`LiveFeed.own_sound`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from mediaflow.live.fmp4 import AudioTrack, VideoTrack, init_segment
from mediaflow.live.h264 import BitstreamError
from mediaflow.live.parts import DEFAULT_PART_S, AudioFrame, LivePart, PartCutter, VideoFrame
from mediaflow.live.sound import LiveSound

# The window holds two groups of pictures and 2 s more (6 s with 2 s segments): a
# player always finds a keyframe part followed by some to buffer.
DEFAULT_KEYFRAME_S = 2.0
# A feed read this recently is watched: its sound is encoded. A player reads every
# part (0.5 s); a paused tab that comes back within this hears sound at once.
WATCH_S = 10.0

FrameTap = Callable[[bytes, VideoFrame], None]
SoundTap = Callable[[AudioTrack, AudioFrame], None]
L = TypeVar("L", FrameTap, SoundTap)


class LiveFeed:
    """One camera's live parts. Use from the event loop; :meth:`tap` from any thread."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        part_s: float = DEFAULT_PART_S,
        keyframe_s: float = DEFAULT_KEYFRAME_S,
        sound: bool = False,
    ) -> None:
        """``part_s``: the parts' length; ``keyframe_s``: the longest time between the
        encoder's keyframes (the camera's ``segment_s``); ``sound``: the feed carries a
        microphone's sound (wait for its format)."""
        self.part_s = part_s
        self.keyframe_s = keyframe_s
        self._loop = loop
        self._cutter = PartCutter(part_s)
        window_parts = math.ceil((2 * keyframe_s + 2.0) / part_s)
        self._parts: deque[LivePart] = deque(maxlen=window_parts)
        self._extradata = b""
        self._video: VideoTrack | None = None
        self._sound: AudioTrack | None = None
        self._wants_sound = sound
        self.init: bytes | None = None
        self.codec: str | None = None
        self._changed = asyncio.Condition()
        self._read_at = float("-inf")
        self._last_keyframe_s: float | None = None
        self._arrived: deque[Callable[[], None]] = deque()  # taps not yet taken, in order
        self._waking = False
        self._listeners: list[FrameTap] = []
        self._sound_listeners: list[SoundTap] = []
        self.frames = 0
        self.sound_from: LiveSound | None = None  # the microphone's sound it carries, if any
        self.own_sound = False  # whether it carries the camera's own sound (tap_sound)

    def tap(self, extradata: bytes, frame: VideoFrame) -> None:
        """Thread-safe: hand ``frame`` to the feed's loop."""
        self._hand_over(partial(self._take, extradata, frame))

    def tap_sound(self, track: AudioTrack, frame: AudioFrame) -> None:
        """Thread-safe: hand an AAC ``frame`` of the camera's own sound (``track``
        describes it) to the feed's loop."""
        self._hand_over(partial(self._take_sound, track, frame))

    def _hand_over(self, call: Callable[[], None]) -> None:
        # One wake-up of the loop for whatever arrived since its last turn: a camera's
        # frames and sound come ~80 times a second, and each wake-up costs the loop.
        self._arrived.append(call)
        if not self._waking:
            self._waking = True
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody watches
                self._loop.call_soon_threadsafe(self._take_arrived)

    def listen(self, listener: FrameTap) -> Callable[[], None]:
        """Call ``listener(extradata, frame)`` on the feed's loop for every frame from now
        on (``extradata``: the newest Annex B parameter sets). It must not block: it runs
        on the event loop between the camera's frames. Returns what stops it."""
        return _added(self._listeners, listener)

    def listen_sound(self, listener: SoundTap) -> Callable[[], None]:
        """Call ``listener(track, frame)`` on the feed's loop for every AAC frame of the
        camera's own sound from now on (:meth:`tap_sound`; a microphone's sound is its
        :class:`~mediaflow.live.sound.LiveSound`'s). It must not block. Returns what
        stops it."""
        return _added(self._sound_listeners, listener)

    def _take_arrived(self) -> None:
        self._waking = False
        while self._arrived:
            self._arrived.popleft()()

    def _take_sound(self, track: AudioTrack, frame: AudioFrame) -> None:
        if track != self._sound:
            self.set_sound(track)
        self.add_audio(frame)
        for listener in list(self._sound_listeners):
            listener(track, frame)

    @property
    def ready(self) -> bool:
        """Whether a player can start now: an init segment and a keyframe part."""
        return self.init is not None and any(part.independent for part in self._parts)

    @property
    def watched(self) -> bool:
        """Whether a player read this feed within ``WATCH_S``."""
        return time.monotonic() - self._read_at < WATCH_S

    def touch(self) -> None:
        """A player read the feed: keep its sound encoded."""
        self._read_at = time.monotonic()

    def set_sound(self, track: AudioTrack | None) -> None:
        """The sound's format (from :class:`~mediaflow.live.sound.LiveSound`); None:
        the sound cannot be live, the feed goes on with video only."""
        if track is None:
            self._wants_sound = False
        elif track != self._sound:
            self._sound = track
            self._cutter.audio_rate = track.sample_rate
        self._build_init()

    def add_audio(self, frame: AudioFrame) -> None:
        self._cutter.add_audio(frame)

    @property
    def parts(self) -> list[LivePart]:
        return list(self._parts)

    def part(self, seq: int) -> LivePart | None:
        for part in self._parts:
            if part.seq == seq:
                return part
        return None

    def segment(self, number: int) -> list[LivePart] | None:
        """The parts of finished segment ``number`` (a newer segment has begun), if all
        of them are still in the window."""
        found = [part for part in self._parts if part.segment == number]
        finished = bool(self._parts) and self._parts[-1].segment > number
        if not found or not found[0].independent or not finished:
            return None
        return found

    async def wait_newer(self, seq: int, timeout_s: float) -> bool:
        """Wait until a part newer than ``seq`` exists; False if ``timeout_s`` passed."""
        return await self.wait_until(lambda newest: newest.seq > seq, timeout_s)

    async def wait_until(self, ready: Callable[[LivePart], bool], timeout_s: float) -> bool:
        """Wait until the newest part is ``ready``; False if ``timeout_s`` passed."""
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: bool(self._parts) and ready(self._parts[-1])),
                    timeout_s,
                )
            except TimeoutError:
                return False
        return True

    def _take(self, extradata: bytes, frame: VideoFrame) -> None:
        self.frames += 1
        if frame.keyframe:
            self._follow_keyframes(frame.time_s)
        if extradata and extradata != self._extradata:
            try:
                self._video = VideoTrack.from_annexb(extradata)
            except BitstreamError:
                return
            self._extradata = extradata
            self._build_init()
        for listener in tuple(self._listeners):
            listener(self._extradata, frame)
        done = self._cutter.add_video(frame)
        if done:
            self._parts.extend(done)
            self._loop.create_task(self._notify())

    def _follow_keyframes(self, time_s: float) -> None:
        """Widen the window for a camera whose groups of pictures are longer than
        ``keyframe_s`` (a copied stream's are the camera's own), so it keeps two."""
        last, self._last_keyframe_s = self._last_keyframe_s, time_s
        if last is None or time_s - last <= self.keyframe_s:
            return
        self.keyframe_s = time_s - last
        window_parts = math.ceil((2 * self.keyframe_s + 2.0) / self.part_s)
        if window_parts > (self._parts.maxlen or 0):
            self._parts = deque(self._parts, maxlen=window_parts)

    def _build_init(self) -> None:
        if self._video is None or (self._wants_sound and self._sound is None):
            return
        self.init = init_segment(self._video, self._sound)
        self.codec = self._video.codec + (f",{self._sound.codec}" if self._sound else "")

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


class LiveHub:
    """The feeds of this process, by (flow, node)."""

    def __init__(self) -> None:
        self._feeds: dict[tuple[str, str], LiveFeed] = {}
        self._sounds: dict[tuple[str, str], LiveSound] = {}
        self._lock = threading.Lock()

    def open_feed(
        self,
        flow: str,
        node: str,
        sound_from: str | None = None,
        *,
        own_sound: bool = False,
        part_s: float = DEFAULT_PART_S,
        keyframe_s: float = DEFAULT_KEYFRAME_S,
    ) -> LiveFeed:
        """A new feed for a camera; call from the event loop that owns it (the
        camera's). The camera hands its frames to :meth:`LiveFeed.tap` from any thread.
        ``sound_from`` names the node in ``flow`` whose sound the feed carries; with
        ``own_sound`` instead, the camera's own AAC frames go to
        :meth:`LiveFeed.tap_sound`; the rest is :class:`LiveFeed`'s."""
        feed = LiveFeed(
            asyncio.get_running_loop(),
            part_s=part_s,
            keyframe_s=keyframe_s,
            sound=sound_from is not None or own_sound,
        )
        feed.own_sound = own_sound and sound_from is None
        with self._lock:
            self._feeds[(flow, node)] = feed
        if sound_from is not None:
            feed.sound_from = self.sound(flow, sound_from)
            feed.sound_from.subscribe(feed)
        return feed

    def sound(self, flow: str, node: str) -> LiveSound:
        """The live sound of a microphone (made on first ask, by it or by a feed)."""
        with self._lock:
            return self._sounds.setdefault((flow, node), LiveSound(f"{flow}/{node}"))

    def drop(self, flow: str, node: str, tap: FrameTap | LiveFeed | None = None) -> None:
        """Forget the feed (the camera stopped); only if it is still ``tap``'s, when given."""
        with self._lock:
            feed = self._feeds.get((flow, node))
            owner = tap if isinstance(tap, LiveFeed) else getattr(tap, "__self__", None)
            if feed is None or (tap is not None and owner is not feed):
                return
            del self._feeds[(flow, node)]
            sounds = list(self._sounds.values())
        for sound in sounds:
            sound.unsubscribe(feed)

    def feed(self, flow: str, node: str) -> LiveFeed | None:
        with self._lock:
            return self._feeds.get((flow, node))

    def names(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._feeds)

    def feeds(self) -> dict[tuple[str, str], LiveFeed]:
        with self._lock:
            return dict(self._feeds)

    def sounds(self) -> dict[tuple[str, str], LiveSound]:
        with self._lock:
            return dict(self._sounds)


def _added(listeners: list[L], listener: L) -> Callable[[], None]:
    """Add ``listener`` to ``listeners``; what takes it out again (once, or never)."""
    listeners.append(listener)

    def stop() -> None:
        with contextlib.suppress(ValueError):
            listeners.remove(listener)

    return stop
