"""WHEP tests' shared parts: a lavfi camera (with a lavfi microphone's sound) running in
this process and served by the real server, and aiortc as a WHEP viewer.

No tests live here; ``tests/test_whep*.py`` import what they use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mediaflow import FlowBuilder, FlowSession
from mediaflow.server import AppState, ServerSettings
from tests.http_support import Served, serve, wait_until
from tests.test_engine import FAST

aiortc = pytest.importorskip("aiortc", reason="the webrtc extra: pip install 'mediaflow[webrtc]'")

WIDTH, HEIGHT = 320, 240
CAMERA = f"lavfi:testsrc2=size={WIDTH}x{HEIGHT}:rate=15"
MICROPHONE = "lavfi:sine=frequency=440:sample_rate=16000"
FLOW = "whep"
WHEP = f"/whep/{FLOW}/cam"
SDP = {"Content-Type": "application/sdp"}
KEPT_SOUND_FRAMES = 50  # a second of 20 ms Opus frames, as the viewer decoded them


def camera_flow(*, sound: bool = True) -> FlowBuilder:
    """A camera whose H.264 goes live (1 s groups of pictures), with a microphone's sound."""
    options = {"live_audio": "mic"} if sound else {}
    flow = FlowBuilder(FLOW).add(
        "cam", "camera", device=CAMERA, image=False, video=True, segment_s=1, **options
    )
    if sound:
        flow = flow.add("mic", "microphone", device=MICROPHONE, realtime=True)
    return flow


@asynccontextmanager
async def served_camera(
    data_dir: Path,
    settings: ServerSettings | None = None,
    *,
    sound: bool = True,
    flow: FlowBuilder | None = None,
) -> AsyncIterator[Served]:
    """The camera flow running (or ``flow``, whose camera is ``FLOW``'s "cam"), served on
    loopback once its live feed is ready."""
    flow = flow or camera_flow(sound=sound)
    session = FlowSession(flow.build(), data_dir, settings=FAST)
    await session.start()
    try:
        state = AppState.for_session(session, settings=settings or ServerSettings())
        async with serve(data_dir, state=state) as served:
            await wait_until(lambda: _ready(session), timeout=15)
            yield served
    finally:
        await session.stop()


def _ready(session: FlowSession) -> bool:
    feed = session.live.feed(FLOW, "cam")
    return feed is not None and feed.ready


@dataclass
class Viewer:
    """aiortc receiving a camera over WHEP: the frames it decoded, its session's URL."""

    pc: aiortc.RTCPeerConnection
    location: str = ""
    sizes: list[tuple[int, int]] = field(default_factory=list)
    audio_frames: int = 0
    sound: list[Any] = field(default_factory=list)  # the newest decoded sound, s16 samples
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await self.pc.close()


async def offer_sdp(*, audio: bool = True) -> tuple[aiortc.RTCPeerConnection, str]:
    """A receive-only peer connection and its offer, candidates gathered (no trickle)."""
    pc = aiortc.RTCPeerConnection(aiortc.RTCConfiguration(iceServers=[]))
    pc.addTransceiver("video", direction="recvonly")
    if audio:
        pc.addTransceiver("audio", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    return pc, pc.localDescription.sdp


async def watch(client: aiohttp.ClientSession, url: str, *, audio: bool = True) -> Viewer:
    """Offer, take the answer, and count what arrives (decoded by aiortc)."""
    pc, sdp = await offer_sdp(audio=audio)
    viewer = Viewer(pc)

    def on_track(track: aiortc.MediaStreamTrack) -> None:
        viewer.tasks.append(asyncio.ensure_future(_read(track, viewer)))

    pc.on("track", on_track)
    async with client.post(url + WHEP, data=sdp, headers=SDP) as resp:
        body = await resp.text()
        assert resp.status == 201, body
        assert resp.content_type == "application/sdp"
        viewer.location = resp.headers["Location"]
    await pc.setRemoteDescription(aiortc.RTCSessionDescription(sdp=body, type="answer"))
    return viewer


async def _read(track: aiortc.MediaStreamTrack, viewer: Viewer) -> None:
    from aiortc.mediastreams import MediaStreamError

    try:
        while True:
            frame = await track.recv()
            if track.kind == "video":
                viewer.sizes.append((frame.width, frame.height))
            else:
                viewer.audio_frames += 1
                viewer.sound = [*viewer.sound[-(KEPT_SOUND_FRAMES - 1) :], frame.to_ndarray()]
    except MediaStreamError:
        return
