"""A flow with a WebRTC (WHIP) node served in this process, and aiortc as a publisher.

:func:`whip_rig` starts a :class:`~mediaflow.FlowSession` whose bus keeps every event,
serves it with a token on a free loopback port and yields a :class:`WhipRig`;
:func:`publish` connects an aiortc peer that sends lavfi's test picture and a tone
(``MediaPlayer``, no STUN server: host candidates only) and returns it with its
session's ``Location``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from mediaflow import FlowBuilder, FlowSession
from mediaflow.engine.events import Event, EventBus
from mediaflow.server import AppState, ServerSettings, bound_port, start_server
from tests.connector_helpers import FAST, MediaSink
from tests.http_support import HOST

TOKEN = "whip-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PICTURE = "testsrc2=size=320x240:rate=15"
TONE = "sine=frequency=440:sample_rate=48000"


@dataclass
class WhipRig:
    session: FlowSession
    bus: EventBus
    port: int
    http: aiohttp.ClientSession

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def events(self, event_type: str) -> list[Event]:
        return [e for e in self.bus.recent(0) if e.type == event_type]

    def received(self, port: str, sink: str = "sink") -> list[Any]:
        return [r for r in MediaSink.received.get(sink, []) if r.port == port]

    async def until(self, condition: Callable[[], bool], timeout: float = 15.0) -> None:
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(0.05)


@asynccontextmanager
async def whip_rig(builder: FlowBuilder, data_dir: Path) -> AsyncIterator[WhipRig]:
    bus = EventBus(history=100_000)
    session = FlowSession(builder.build(), data_dir, settings=FAST, bus=bus)
    await session.start()
    try:
        state = AppState.for_session(session, settings=ServerSettings(token=TOKEN))
        runner = await start_server(state, HOST, 0)
        try:
            async with aiohttp.ClientSession() as http:
                yield WhipRig(session, bus, bound_port(runner), http)
        finally:
            await runner.cleanup()
            await state.close()
    finally:
        await session.stop()
        MediaSink.received.clear()


@dataclass
class Publisher:
    pc: Any  # aiortc's RTCPeerConnection
    location: str
    players: list[Any]

    async def close(self) -> None:
        await self.pc.close()
        for player in self.players:
            for track in (player.audio, player.video):
                if track is not None:
                    track.stop()


async def publish(rig: WhipRig, path: str, *, audio: bool = True) -> Publisher:
    """An aiortc publisher connected to ``path`` (``/whip/{flow}/{node}``)."""
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
    from aiortc.contrib.media import MediaPlayer

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    players = [MediaPlayer(PICTURE, format="lavfi")]
    pc.addTrack(players[0].video)
    if audio:
        players.append(MediaPlayer(TONE, format="lavfi"))
        pc.addTrack(players[1].audio)
    await pc.setLocalDescription(await pc.createOffer())
    headers = AUTH | {"Content-Type": "application/sdp"}
    async with rig.http.post(rig.url(path), data=pc.localDescription.sdp, headers=headers) as r:
        assert r.status == 201, await r.text()
        assert r.content_type == "application/sdp"
        answer, location = await r.text(), r.headers["Location"]
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    return Publisher(pc, location, players)
