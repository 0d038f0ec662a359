"""Live feeds of this process's cameras: the parts a player reads, kept in a small window.

A camera connector asks :meth:`LiveHub.tap` for its feed's entry point and hands it
every H.264 frame its segment encoder produces (on the encoding thread: the tap only
schedules the frame onto the event loop, so encoding never waits for a viewer). The
feed cuts frames into parts (:class:`~mediaflow.live.parts.PartCutter`) and keeps the
newest ``window_parts`` of them, with the init segment built from the encoder's
parameter sets: memory is bounded by the window whatever the viewers do, and a viewer
that falls behind finds only newer parts, starting at a keyframe. The server in the
same process (``mediaflow run``) answers ``/live/...`` from :data:`HUB`; a process
without the camera has no feed for it. Video only so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable

from mediaflow.live.fmp4 import VideoTrack, init_segment
from mediaflow.live.h264 import BitstreamError
from mediaflow.live.parts import DEFAULT_PART_S, LivePart, PartCutter, VideoFrame

DEFAULT_WINDOW_PARTS = 12  # 6 s of 0.5 s parts: a player's start and a little slack

FrameTap = Callable[[bytes, VideoFrame], None]


class LiveFeed:
    """One camera's live parts. Use from the event loop; :meth:`tap` from any thread."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        part_s: float = DEFAULT_PART_S,
        window_parts: int = DEFAULT_WINDOW_PARTS,
    ) -> None:
        self.part_s = part_s
        self._loop = loop
        self._cutter = PartCutter(part_s)
        self._parts: deque[LivePart] = deque(maxlen=window_parts)
        self._extradata = b""
        self.init: bytes | None = None
        self.codec: str | None = None
        self._changed = asyncio.Condition()
        self.frames = 0

    def tap(self, extradata: bytes, frame: VideoFrame) -> None:
        """Thread-safe: schedule ``frame`` onto the feed's loop."""
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is left to watch
            self._loop.call_soon_threadsafe(self._take, extradata, frame)

    @property
    def ready(self) -> bool:
        """Whether a player can start now: an init segment and a keyframe part."""
        return self.init is not None and any(part.independent for part in self._parts)

    @property
    def parts(self) -> list[LivePart]:
        return list(self._parts)

    def part(self, seq: int) -> LivePart | None:
        for part in self._parts:
            if part.seq == seq:
                return part
        return None

    async def wait_newer(self, seq: int, timeout_s: float) -> bool:
        """Wait until a part newer than ``seq`` exists; False if ``timeout_s`` passed."""
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: bool(self._parts) and self._parts[-1].seq > seq),
                    timeout_s,
                )
            except TimeoutError:
                return False
        return True

    def _take(self, extradata: bytes, frame: VideoFrame) -> None:
        self.frames += 1
        if extradata and extradata != self._extradata:
            try:
                track = VideoTrack.from_annexb(extradata)
            except BitstreamError:
                return
            self._extradata = extradata
            self.init, self.codec = init_segment(track, None), track.codec
        done = self._cutter.add_video(frame)
        if done:
            self._parts.extend(done)
            self._loop.create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


class LiveHub:
    """The feeds of this process, by (flow, node)."""

    def __init__(self) -> None:
        self._feeds: dict[tuple[str, str], LiveFeed] = {}
        self._lock = threading.Lock()

    def tap(self, flow: str, node: str) -> FrameTap:
        """The entry point for a camera's frames; call from the event loop that owns
        the feed (the camera's), then from any thread. A new tap starts a new feed."""
        feed = LiveFeed(asyncio.get_running_loop())
        with self._lock:
            self._feeds[(flow, node)] = feed
        return feed.tap

    def drop(self, flow: str, node: str, tap: FrameTap | None = None) -> None:
        """Forget the feed (the camera stopped); only if it is still ``tap``'s, when given."""
        with self._lock:
            feed = self._feeds.get((flow, node))
            if feed is not None and (tap is None or getattr(tap, "__self__", None) is feed):
                del self._feeds[(flow, node)]

    def feed(self, flow: str, node: str) -> LiveFeed | None:
        with self._lock:
            return self._feeds.get((flow, node))

    def names(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._feeds)


HUB = LiveHub()
