"""A WHIP publisher in its own process, to be killed mid-stream (no RTCP BYE, no DELETE).

``python -m tests.whip_publisher URL TOKEN`` publishes lavfi's test picture and a tone
to ``URL`` with aiortc, prints ``published <Location>`` and keeps sending until killed.

``--flood`` publishes video only, as fast as aiortc can send it: 4K H.264 encoded
once here (PyAV) and sent again and again without pacing, each time as new frames,
which the server has to decode at many times the rate of a camera.
"""

from __future__ import annotations

import asyncio
import fractions
import sys
from typing import Any

import aiohttp
import av
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
)
from aiortc.contrib.media import MediaPlayer

FLOOD_FRAMES = 30  # one group of pictures, sent over and over
# Big pictures in small packets: a still grey 4K picture is a few hundred bytes a
# frame to receive and a whole 4K picture to decode.
FLOOD_SOURCE = f"color=c=gray:size=3840x2160:rate=30:duration={FLOOD_FRAMES / 30}"


class FloodTrack(MediaStreamTrack):
    """Encoded H.264 frames, one after the other with no pause (aiortc packs them)."""

    kind = "video"

    def __init__(self) -> None:
        super().__init__()
        self.packets = _encoded_gop()
        self.sent = 0

    async def recv(self) -> av.Packet[Any]:
        data = self.packets[self.sent % len(self.packets)]
        packet = av.Packet(data)
        packet.pts, packet.time_base = self.sent * 3000, fractions.Fraction(1, 90000)
        self.sent += 1
        await asyncio.sleep(0)  # lets RTCP and ICE run; nothing else holds it back
        return packet


def _encoded_gop() -> list[bytes]:
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = 3840, 2160, "yuv420p"
    encoder.time_base = fractions.Fraction(1, 30)
    encoder.options = {"tune": "zerolatency", "g": str(FLOOD_FRAMES), "preset": "ultrafast"}
    packets: list[bytes] = []
    with av.open(FLOOD_SOURCE, format="lavfi") as source:
        for index, frame in enumerate(source.decode(video=0)):
            picture = frame.reformat(format="yuv420p")
            picture.pts, picture.pict_type = index, av.video.frame.PictureType.NONE  # not all I
            packets += [bytes(p) for p in encoder.encode(picture)]
    packets += [bytes(p) for p in encoder.encode(None)]
    return packets


async def main(url: str, token: str, flood: bool) -> None:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    if flood:
        pc.addTrack(FloodTrack())
        (video,) = pc.getTransceivers()
        h264 = [c for c in RTCRtpSender.getCapabilities("video").codecs if c.name == "H264"]
        video.setCodecPreferences(h264)  # what the packets are
    else:
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
    asyncio.run(main(sys.argv[1], sys.argv[2], "--flood" in sys.argv[3:]))
