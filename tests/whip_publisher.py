"""A WHIP publisher in its own process, to be killed mid-stream (no RTCP BYE, no DELETE).

``python -m tests.whip_publisher URL TOKEN`` publishes lavfi's test picture and a tone
to ``URL`` with aiortc, prints ``published <Location>`` and keeps sending until killed.
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.contrib.media import MediaPlayer


async def main(url: str, token: str) -> None:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTrack(MediaPlayer("testsrc2=size=320x240:rate=15", format="lavfi").video)
    pc.addTrack(MediaPlayer("sine=frequency=440:sample_rate=48000", format="lavfi").audio)
    await pc.setLocalDescription(await pc.createOffer())
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/sdp"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=pc.localDescription.sdp, headers=headers) as answer,
    ):
        if answer.status != 201:
            raise SystemExit(f"{answer.status}: {await answer.text()}")
        sdp, location = await answer.text(), answer.headers["Location"]
    await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="answer"))
    print("published", location, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
