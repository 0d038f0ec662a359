"""The publishers of a ``webrtc`` node: their peer connections, and the inputs they feed.

:func:`answer_offer` turns a WHIP offer into an aiortc peer connection and its answer
(no STUN or TURN server: host candidates, which is what a LAN and this machine need;
ICE candidates travel in the SDP, no trickle; DTLS's server side when the offer
leaves it open, :func:`~mediaflow.live.webrtc.answer_as_dtls_server`, so that a
publisher with an RSA certificate connects). Anything aiortc refuses in an offer is
an :class:`~mediaflow.ingest.IngestRefused` (400): a malformed offer never becomes a
5xx.

A :class:`PublisherSlot` holds the node's publishers, at most ``cap`` at once (past
it: 503). Each accepted publisher's tracks become a camera's and a microphone's inputs
(:mod:`devices.track_input`), queued per kind: the node's video run and audio run take
the oldest one waiting, so with ``cap > 1`` a second publisher stands by and takes
over when the first leaves. A publisher ends when it hangs up (``DELETE``), when its
connection fails or closes, when one of its tracks ends or goes quiet (the input's
``DeviceLost``: the runs publish ``device_lost``), or when it never connects within
``first_s``; its peer connection is then closed and its place freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from connectors._whip_decode import LatestFrames, bound_decoding
from devices import AudioInput, DeviceNotFound
from devices.track_input import TrackVideoInput, open_track_audio, open_track_video
from mediaflow.ingest import IngestRefused

if TYPE_CHECKING:
    from aiortc import RTCPeerConnection

log = logging.getLogger(__name__)

Kind = Literal["video", "audio"]
# setRemoteDescription and setLocalDescription (host candidates only): milliseconds
# here; an offer that takes longer is refused rather than holding the request.
NEGOTIATE_S = 10.0
WATCH_S = 0.25  # how often a publisher's liveness is looked at
RETRY_AFTER_S = 5  # told to a publisher refused for the cap


@dataclass(frozen=True)
class TrackOptions:
    """How a publisher's tracks become inputs (the node's options)."""

    rate: int = 16000
    channels: int = 1
    chunk_ms: int = 100
    idle_s: float = 3.0
    first_s: float = 10.0


def aiortc_missing() -> str | None:
    """Why WebRTC cannot work here, or None."""
    try:
        import aiortc  # noqa: F401
    except ImportError as exc:
        return f"aiortc is not installed (pip install 'mediaflow[webrtc]'): {exc}"
    return None


class Answered(NamedTuple):
    pc: RTCPeerConnection
    tracks: list[Any]  # what the publisher sends, as aiortc's received tracks
    sdp: str  # the answer
    decoding: list[LatestFrames]  # the receivers' bounded decoding queues


async def answer_offer(sdp: str) -> Answered:
    """A peer connection for the offer ``sdp``, its received tracks, its answer and
    its receivers' decoding queues (bounded: :mod:`connectors._whip_decode`).

    Raises :class:`IngestRefused` (400) for anything that cannot be answered: not an
    SDP offer, nothing to receive, a negotiation aiortc refuses or that takes longer
    than ``NEGOTIATE_S``; 503 without aiortc.
    """
    missing = aiortc_missing()
    if missing is not None:
        raise IngestRefused(503, missing)
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    from mediaflow.live.webrtc import answer_as_dtls_server

    if not sdp.startswith("v=0") or "\nm=" not in sdp:
        raise IngestRefused(400, "the body is not an SDP offer (v=0 ... m=)")
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # no STUN: nothing leaves the LAN
    tracks: list[Any] = []
    pc.on("track", tracks.append)
    try:
        async with asyncio.timeout(NEGOTIATE_S):
            await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
            if not tracks:
                raise IngestRefused(400, "the offer sends no audio or video")
            decoding = bound_decoding(pc)  # before it connects
            answer_as_dtls_server(pc, sdp)
            await pc.setLocalDescription(await pc.createAnswer())
    except IngestRefused:
        await pc.close()
        raise
    except Exception as exc:  # aiortc's refusals are ValueError, KeyError, its own ...
        await pc.close()
        reason = f"the offer cannot be answered: {type(exc).__name__}: {exc}"
        raise IngestRefused(400, reason) from exc
    return Answered(pc, tracks, pc.localDescription.sdp, decoding)


@dataclass(eq=False)
class Publisher:
    """One WHIP session: its peer connection and the inputs its tracks feed."""

    id: str
    pc: RTCPeerConnection
    video: TrackVideoInput | None
    audio: AudioInput | None
    lost: threading.Event  # set by an input's producer when its track ended
    decoding: list[LatestFrames] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    ended: bool = False


class PublisherSlot:
    """A node's publishers (see the module doc). Use from the event loop."""

    def __init__(self, name: str, cap: int, options: TrackOptions) -> None:
        """``name`` names the inputs in events and meta (the node's ``device``)."""
        self.name = name
        self.cap = cap
        self.options = options
        self.publishers: dict[str, Publisher] = {}
        self._waiting: dict[Kind, deque[tuple[Publisher, Any]]] = {
            "video": deque(),
            "audio": deque(),
        }
        self._arrived: asyncio.Event | None = None
        self._watchers: set[asyncio.Task[None]] = set()

    def _event(self) -> asyncio.Event:
        if self._arrived is None:
            self._arrived = asyncio.Event()
        return self._arrived

    async def accept(self, sdp: str) -> tuple[str, str]:
        """Answer an offer: (the answer's SDP, the session id). Raises
        :class:`IngestRefused`: 503 past the cap, 400 for an offer it cannot answer."""
        if len(self.publishers) >= self.cap:
            raise IngestRefused(
                503,
                f"{self.name} takes {self.cap} publisher(s) at a time and has them",
                retry_after_s=RETRY_AFTER_S,
            )
        answered = await answer_offer(sdp)
        pc, tracks = answered.pc, answered.tracks
        if len(self.publishers) >= self.cap:  # another offer won the place meanwhile
            await pc.close()
            raise IngestRefused(503, f"{self.name} is taken", retry_after_s=RETRY_AFTER_S)
        publisher = self._publisher(pc, tracks)
        publisher.decoding = answered.decoding
        self.publishers[publisher.id] = publisher
        for kind, opened in (("video", publisher.video), ("audio", publisher.audio)):
            if opened is not None:
                self._waiting[kind].append((publisher, opened))  # type: ignore[index]
        self._event().set()
        watcher = asyncio.create_task(self._watch(publisher), name=f"whip {publisher.id}")
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        log.info("%s: publisher %s accepted (%d tracks)", self.name, publisher.id, len(tracks))
        return answered.sdp, publisher.id

    def _publisher(self, pc: RTCPeerConnection, tracks: list[Any]) -> Publisher:
        lost = threading.Event()
        options = self.options
        video = audio = None
        for track in tracks:
            if track.kind == "video" and video is None:
                video = open_track_video(
                    self.name, track, idle_s=options.idle_s, first_s=options.first_s, lost=lost
                )
            elif track.kind == "audio" and audio is None:
                audio = open_track_audio(
                    self.name, track, rate=options.rate, channels=options.channels,
                    chunk_ms=options.chunk_ms, idle_s=options.idle_s, first_s=options.first_s,
                    lost=lost,
                )  # fmt: skip
        # Pulled from now on, taken by a run or not: a publisher standing by fills only
        # its bounded bridge, never the receiver's unbounded queue.
        for opened in (video, audio):
            if opened is not None:
                opened.start()
        return Publisher(secrets.token_urlsafe(12), pc, video, audio, lost)

    def sends_sound(self, video: Any) -> bool:
        """Whether the publisher whose video input is ``video`` sends sound too."""
        return any(p.video is video and p.audio is not None for p in self.publishers.values())

    async def take(self, kind: Kind, stopping: Callable[[], bool], wait_s: float | None) -> Any:
        """The next waiting input of ``kind`` (the run now owns it and closes it).

        Waits up to ``wait_s`` (None: until one comes), looking at ``stopping`` now and
        then; returns None once the flow stops. Raises ``DeviceNotFound`` when
        ``wait_s`` passes with none (a reconnect's attempt failed: try again later).
        """
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while not stopping():
            queue = self._waiting[kind]
            while queue:
                publisher, opened = queue.popleft()
                if not publisher.ended:
                    return opened
            left = WATCH_S if deadline is None else min(WATCH_S, deadline - time.monotonic())
            if left <= 0:
                raise DeviceNotFound(self.name, [], reason="no WHIP publisher is connected")
            event = self._event()
            event.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await event.wait()
        return None

    async def end(self, session: str) -> bool:
        """Hang up ``session``; False when there is none."""
        publisher = self.publishers.get(session)
        if publisher is None:
            return False
        await self._end(publisher, "hung up")
        return True

    async def close(self) -> None:
        """End every publisher (the node stops)."""
        for publisher in list(self.publishers.values()):
            await self._end(publisher, "the flow stopped")
        for watcher in list(self._watchers):
            watcher.cancel()

    async def _watch(self, publisher: Publisher) -> None:
        """End ``publisher`` once its connection failed, a track ended or went quiet,
        or it never connected within ``first_s``."""
        pc = publisher.pc
        while not publisher.ended:
            await asyncio.sleep(WATCH_S)
            state = pc.connectionState
            age = time.monotonic() - publisher.started
            if publisher.lost.is_set():
                reason = "its media stopped"
            elif state in ("failed", "closed"):
                reason = f"its connection {state}"
            elif state != "connected" and age > self.options.first_s:
                reason = f"it did not connect within {self.options.first_s:g} s"
            else:
                continue
            await self._end(publisher, reason)

    async def _end(self, publisher: Publisher, reason: str) -> None:
        if publisher.ended:
            return
        publisher.ended = True
        self.publishers.pop(publisher.id, None)
        log.info("%s: publisher %s ended: %s", self.name, publisher.id, reason)
        # Inputs no run took yet are closed here; a run's input sees its track end.
        for queue in self._waiting.values():
            for waiting, opened in [entry for entry in queue if entry[0] is publisher]:
                queue.remove((waiting, opened))
                await opened.aclose()
        await publisher.pc.close()
