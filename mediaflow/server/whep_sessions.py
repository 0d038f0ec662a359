"""WHEP sessions: one aiortc peer connection per viewer, fed from the shared fanouts.

:meth:`WhepService.open` answers an SDP offer: a peer connection with no STUN or
TURN server (its host candidates, gathered before the answer is returned: the WHEP
draft's non-trickle mode), the camera's H.264 on the offer's video section (H.264
only, whatever else the viewer offers) and the feed's sound as Opus on its audio
section when it carries one (its microphone's, or a copied camera's own), taking
DTLS's server side when the offer leaves it open
(:func:`~mediaflow.live.webrtc.answer_as_dtls_server`: peers with RSA certificates
connect too). Each session is watched every ``WATCH_INTERVAL_S`` and ended (:meth:`WhepService.end`)
when:

- its peer connection failed or closed (ICE failure, the viewer closed it);
- it did not connect within ``CONNECT_S`` of the answer;
- the viewer sent no RTCP for ``SILENT_S`` once its video started (receivers
  report about once a second: a viewer that froze, crashed or lost its network);
- its sender stopped taking packets for ``SILENT_S`` while some waited;
- the camera's feed is gone (the camera stopped; a viewer offers again).

Imports aiortc: :mod:`mediaflow.server.whep` loads this module on the first offer.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, field

from aiortc import (
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpSender,
    RTCRtpTransceiver,
    RTCSessionDescription,
)

from mediaflow.live.fanout import FanoutRegistry, ViewerQueue
from mediaflow.live.hub import LiveFeed, LiveHub
from mediaflow.live.rtp import PLAYOUT_DELAY_URI, answer_with_extension
from mediaflow.live.webrtc import (
    Heard,
    NamedTrack,
    UnsupportedAiortc,
    ViewerStream,
    answer_as_dtls_server,
)

log = logging.getLogger("mediaflow.whep")

CONNECT_S = 10.0  # ICE and DTLS on a LAN take well under a second
SILENT_S = 5.0  # about five receiver reports missed
WATCH_INTERVAL_S = 0.5
RETRY_AFTER_S = 5


class Refused(Exception):
    """An offer this server does not answer: the HTTP status, why, and headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


@dataclass(eq=False)
class WhepSession:
    id: str
    flow: str
    node: str
    feed: LiveFeed
    pc: RTCPeerConnection
    video: ViewerQueue
    audio: ViewerQueue | None = None
    answer: str = ""  # the SDP answer given to the viewer
    streams: list[ViewerStream] = field(default_factory=list)  # video, then any sound
    heard: Heard = field(default_factory=Heard)
    answered_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None  # when its first video packet was taken
    ended: str | None = None  # why it ended
    watcher: asyncio.Task[None] | None = None


def _prefer(transceiver: RTCRtpTransceiver, mime_types: tuple[str, ...]) -> None:
    kind = transceiver.kind
    capabilities = RTCRtpSender.getCapabilities(kind).codecs
    transceiver.setCodecPreferences([c for c in capabilities if c.mimeType.lower() in mime_types])


class WhepService:
    """The sessions of this server, and the fanouts they share. Use from the loop
    that owns the live hub's feeds."""

    def __init__(self, hub: LiveHub, max_viewers: int) -> None:
        self.hub = hub
        self.max_viewers = max_viewers
        self.sessions: dict[str, WhepSession] = {}
        self.fanouts = FanoutRegistry()
        self.ended: dict[str, int] = {}  # sessions ended, by reason (metrics, tests)

    def viewers(self, flow: str, node: str) -> int:
        return sum(1 for s in self.sessions.values() if (s.flow, s.node) == (flow, node))

    async def open(self, flow: str, node: str, feed: LiveFeed, offer: str) -> WhepSession:
        """A new session answering ``offer`` (``session.pc.localDescription``).

        Raises :class:`Refused`: 503 past the viewer cap, 400 for an offer that cannot
        be answered (its text, its codecs, its transports)."""
        if self.viewers(flow, node) >= self.max_viewers:
            raise Refused(
                503,
                f"{flow}/{node} has {self.max_viewers} WebRTC viewers already"
                " (MEDIAFLOW_WHEP_MAX_VIEWERS)",
                {"Retry-After": str(RETRY_AFTER_S)},
            )
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # no STUN: nothing leaves the LAN
        video = self.fanouts.video_of(feed).join()
        session = WhepSession(secrets.token_urlsafe(16), flow, node, feed, pc, video)
        self.sessions[session.id] = session  # counts toward the cap while it negotiates
        try:
            await self._negotiate(session, offer)
        except Exception as exc:
            await self.end(session.id, "refused offer")
            if isinstance(exc, Refused):
                raise
            # Everything up to the answer comes from the offer: its failure is the offer's.
            log.info("WHEP offer for %s/%s refused: %r", flow, node, exc)
            raise Refused(400, f"the SDP offer cannot be answered: {exc}") from exc
        pc.on("connectionstatechange", lambda: self._state_changed(session))
        session.watcher = asyncio.get_running_loop().create_task(self._watch(session))
        return session

    async def _negotiate(self, session: WhepSession, offer: str) -> None:
        # The transceivers exist before the offer is applied, so that aiortc matches the
        # offer's sections to them and negotiates only the codecs they prefer (it
        # filters codecs in setRemoteDescription): H.264 for video, Opus for sound.
        pc = session.pc
        video = pc.addTransceiver(NamedTrack("video"), direction="sendonly")
        _prefer(video, ("video/h264", "video/rtx"))
        try:  # before anything connects: the sender starts its RTP loop once it does
            stream = ViewerStream(video.sender, session.video, session.heard)
            session.streams.append(stream)
            sound = session.feed.sound_from
            if sound is not None:
                session.audio = self.fanouts.sound_of(sound).join()
            elif session.feed.own_sound:
                fanout = self.fanouts.own_sound_of(session.feed, f"{session.flow}/{session.node}")
                session.audio = fanout.join()
            if session.audio is not None:
                audio = pc.addTransceiver(NamedTrack("audio"), direction="sendonly")
                _prefer(audio, ("audio/opus",))
                session.streams.append(ViewerStream(audio.sender, session.audio, session.heard))
        except UnsupportedAiortc as exc:
            raise Refused(501, str(exc)) from exc
        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        if video.mid is None:
            raise Refused(400, "the offer has no video section to receive the camera on")
        answer_as_dtls_server(pc, offer)
        await pc.setLocalDescription(await pc.createAnswer())  # gathers candidates first
        # aiortc does not know playout-delay: the video stream writes it itself.
        session.answer, delay_id = answer_with_extension(
            offer, pc.localDescription.sdp, "video", PLAYOUT_DELAY_URI
        )
        stream.agree_playout_delay(delay_id)

    def _state_changed(self, session: WhepSession) -> None:
        if session.pc.connectionState in ("failed", "closed") and session.ended is None:
            asyncio.get_running_loop().create_task(
                self.end(session.id, f"connection {session.pc.connectionState}")
            )

    def _verdict(self, session: WhepSession, now: float) -> str | None:
        """Why ``session`` must end now, or None. Reads only the session and the hub."""
        state = session.pc.connectionState
        if state in ("failed", "closed"):
            return f"connection {state}"
        if self.hub.feed(session.flow, session.node) is not session.feed:
            return "the camera's feed is gone"
        if state != "connected":
            return "did not connect" if now - session.answered_at > CONNECT_S else None
        if session.started_at is None:
            if session.video.taken:
                session.started_at = now
            return None
        last = max(session.heard.at, session.started_at)
        if now - last > SILENT_S:
            return "viewer silent (no RTCP)"
        if session.video.stalled(now, SILENT_S):
            return "viewer stalled"
        return None

    async def _watch(self, session: WhepSession) -> None:
        while session.ended is None:
            await asyncio.sleep(WATCH_INTERVAL_S)
            why = self._verdict(session, time.monotonic())
            if why is not None:
                await self.end(session.id, why)

    async def end(self, session_id: str, why: str = "ended by the viewer") -> bool:
        """End a session: close its peer connection, leave its fanouts. False if unknown."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        session.ended = why
        self.ended[why] = self.ended.get(why, 0) + 1
        sent = ", ".join(f"{s.kind} {s.sent} packets ({s.resent} resent)" for s in session.streams)
        log.info("WHEP viewer %s of %s/%s ended: %s; sent %s", session.id, session.flow,
                 session.node, why, sent or "nothing")  # fmt: skip
        for fanout in self.fanouts.all():
            for queue in (session.video, session.audio):
                if queue is not None and queue in fanout.viewers:
                    fanout.leave(queue)
        self.fanouts.release()
        watcher = session.watcher
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
        await session.pc.close()
        return True

    async def close(self) -> None:
        """End every session (the server stops)."""
        for session_id in list(self.sessions):
            try:
                await self.end(session_id, "server stopped")
            except Exception:  # the next sessions still end
                log.exception("ending WHEP session %s failed", session_id)
        self.fanouts.close()
