"""WHEP live view (issue 30): aiortc watches a lavfi camera served by the real server.

The camera runs in this process, so the test sees both ends: the frames the live
feed took from the camera's segment encoder, and what aiortc received and decoded.
What arrives is the camera's own H.264: every access unit the viewer reassembled is
a frame of the feed, byte for byte (with the parameter sets before keyframes), and
aiortc's H.264 encoder never ran on the server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mediaflow.live.h264 import NAL_PPS, NAL_SPS, nal_type, split_annexb
from mediaflow.live.parts import VideoFrame
from mediaflow.live.webrtc import HISTORY_PACKETS
from mediaflow.server.whep import WHEP as WHEP_KEY
from tests.http_support import wait_until
from tests.whep_support import (
    FLOW,
    HEIGHT,
    SDP,
    WHEP,
    WIDTH,
    aiortc,
    offer_sdp,
    served_camera,
    watch,
)

pytestmark = pytest.mark.timeout(60)


async def test_aiortc_watches_the_camera_its_own_h264_then_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiortc.codecs import h264

    encodes: list[Any] = []
    received: list[bytes] = []
    real_encode, real_decode = h264.H264Encoder.encode, h264.H264Decoder.decode
    real_pack = h264.H264Encoder.pack

    def counted_encode(self: Any, *args: Any) -> Any:
        encodes.append(args)
        return real_encode(self, *args)

    def counted_pack(self: Any, *args: Any) -> Any:
        encodes.append(args)
        return real_pack(self, *args)

    def recorded_decode(self: Any, encoded: Any) -> Any:
        received.append(bytes(encoded.data))  # an access unit as the viewer reassembled it
        return real_decode(self, encoded)

    monkeypatch.setattr(h264.H264Encoder, "encode", counted_encode)
    monkeypatch.setattr(h264.H264Encoder, "pack", counted_pack)
    monkeypatch.setattr(h264.H264Decoder, "decode", recorded_decode)
    async with served_camera(tmp_path) as served:
        feed = served.state.live.feed(FLOW, "cam")
        assert feed is not None
        camera: list[bytes] = []

        def keep(extradata: bytes, frame: VideoFrame) -> None:
            camera.append(frame.as_sample())

        stop = feed.listen(keep)
        viewer = await watch(served.client, served.url)
        try:
            assert viewer.location.startswith(f"{WHEP}/")
            await wait_until(lambda: len(viewer.sizes) >= 20 and viewer.audio_frames >= 20, 15)
            assert set(viewer.sizes) == {(WIDTH, HEIGHT)}
            service = served.runner.app[WHEP_KEY].service
            assert service is not None and len(service.sessions) == 1
            (session,) = service.sessions.values()
            assert session.video.dropped == 0 or session.video.restarts > 0
            await _resent_on_nack(viewer, session)
        finally:
            stop()
        # Byte for byte: each NAL the viewer got (parameter sets aside) is a camera frame's.
        sent = {nal for unit in camera for nal in _nals(unit)}
        nals = [nal for unit in received for nal in split_annexb(unit)]
        got = [nal for nal in nals if nal_type(nal) not in (NAL_SPS, NAL_PPS)]
        assert got and all(nal in sent for nal in got)
        assert encodes == []  # the fanout cut the payloads; aiortc neither encoded nor packed
        async with served.client.delete(served.url + viewer.location) as resp:
            assert resp.status == 204
        assert service.sessions == {} and service.fanouts.video == {}
        async with served.client.delete(served.url + viewer.location) as resp:
            assert resp.status == 404
        await viewer.close()


async def _resent_on_nack(viewer: Any, session: Any) -> None:
    """A NACK from the viewer for a packet just sent has it sent again; the sender's
    statistics (and so its RTCP sender reports) count what the stream sent."""
    video = session.streams[0]
    (sender, *_) = [s for s in session.pc.getSenders() if s.kind == "video"]
    stats = [s for s in (await sender.getStats()).values() if s.type == "outbound-rtp"]
    assert stats and stats[0].packetsSent > 0 and stats[0].packetsSent <= video.sent
    # A frame's packets leave in one system call (UDP segmentation), not one each.
    assert video.wire is not None and 0 < video.wire.calls < video.sent
    (receiver, *_) = [t.receiver for t in viewer.pc.getTransceivers() if t.kind == "video"]
    sequence = video._history.newest  # sent: still held
    assert sequence is not None
    await receiver._send_rtcp_nack(sender._ssrc, [(sequence - 2 * HISTORY_PACKETS) & 0xFFFF])
    await receiver._send_rtcp_nack(sender._ssrc, [sequence])
    await wait_until(lambda: video.resent >= 1, 5)
    assert video.resent == 1  # not the one older than the history


def _nals(sample: bytes) -> list[bytes]:
    nals, position = [], 0
    while position < len(sample):
        size = int.from_bytes(sample[position : position + 4], "big")
        nals.append(sample[position + 4 : position + 4 + size])
        position += 4 + size
    return nals


async def test_offers_that_are_not_sdp_are_4xx_and_the_server_goes_on(tmp_path: Path) -> None:
    async with served_camera(tmp_path, sound=False) as served:
        url = served.url + WHEP
        async with served.client.post(url, data="v=0", headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415
        statuses = []
        for index in range(100):
            body = _garbage(index)
            async with served.client.post(url, data=body, headers=SDP) as resp:
                statuses.append(resp.status)
        assert all(400 <= s < 500 for s in statuses), statuses
        pc, sdp = await offer_sdp(audio=False)
        try:
            async with served.client.post(url, data=sdp, headers=SDP) as resp:
                assert resp.status == 201  # still answering
        finally:
            await pc.close()


def _garbage(index: int) -> bytes:
    """Offers that look more and more like SDP: random bytes, broken lines, SDP
    without H.264, SDP with H.264 but broken transports."""
    import random

    rng = random.Random(index)
    kind = index % 5
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 2000))
    if kind == 1:
        return "\r\n".join("".join(rng.choices("v=0oamc:\r\n ", k=30)) for _ in range(10)).encode()
    if kind == 2:
        audio = "m=audio 9 UDP/TLS/RTP/SAVPF 111"
        return f"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n{audio}\r\n".encode()
    video = "m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 H264/90000\r\n"
    if kind == 3:
        return f"v=0\r\n{video}".encode()
    lines = ["v=0", "o=- 1 1 IN IP4 0.0.0.0", "s=-", "t=0 0", video.strip()]
    lines += [f"a={rng.choice(['ice-ufrag', 'fingerprint', 'setup', 'mid', 'group'])}:"
              f"{rng.randbytes(8).hex()}" for _ in range(rng.randrange(0, 6))]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n").encode()


async def test_the_viewer_cap_answers_503(tmp_path: Path) -> None:
    from mediaflow.server import ServerSettings

    async with served_camera(tmp_path, ServerSettings(whep_max_viewers=1), sound=False) as served:
        first = await watch(served.client, served.url, audio=False)
        await wait_until(lambda: len(first.sizes) >= 5, 10)
        pc, sdp = await offer_sdp(audio=False)
        try:
            async with served.client.post(served.url + WHEP, data=sdp, headers=SDP) as resp:
                assert resp.status == 503
                assert resp.headers["Retry-After"].isdigit()
        finally:
            await pc.close()
            await first.close()
        # The first viewer closed its peer connection: its seat frees within seconds.
        service = served.runner.app[WHEP_KEY].service
        assert service is not None
        await wait_until(lambda: not service.sessions, 3)
        assert service.ended == {"connection closed": 1}
        second = await watch(served.client, served.url, audio=False)
        await second.close()
    await asyncio.sleep(0)
    assert aiortc is not None


async def test_a_viewer_that_stops_reading_is_dropped_within_seconds(tmp_path: Path) -> None:
    """A viewer process frozen mid-stream (SIGSTOP: it reads nothing, reports nothing)
    is dropped once its RTCP falls silent; what waits for it never passed its bound."""
    import signal
    import sys

    from mediaflow.live.fanout import VIDEO_QUEUE_FRAMES
    from mediaflow.server.whep_sessions import SILENT_S

    async with served_camera(tmp_path, sound=False) as served:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.whep_viewer", served.url, stdout=asyncio.subprocess.PIPE
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 15)
            assert line.startswith(b"watching"), line
            service = served.runner.app[WHEP_KEY].service
            assert service is not None
            (session,) = service.sessions.values()
            proc.send_signal(signal.SIGSTOP)
            stopped = asyncio.get_running_loop().time()
            await wait_until(lambda: not service.sessions, SILENT_S + 5)
            took = asyncio.get_running_loop().time() - stopped
            assert took < SILENT_S + 3, took
            assert session.ended == "viewer silent (no RTCP)"
            assert session.video.max_depth <= VIDEO_QUEUE_FRAMES
            assert service.fanouts.video == {}  # nothing kept for it
        finally:
            proc.kill()
            await proc.wait()


async def test_without_its_socket_a_viewer_is_sent_through_aiortc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the wire cannot be had (an aioice that keeps its pairs elsewhere, no
    descriptor left), the stream hands each packet to aiortc's DTLS transport, which
    also sends again what a NACK asks for."""
    from mediaflow.live.rtp_wire import Wire

    monkeypatch.setattr(Wire, "of", classmethod(lambda cls, dtls: None))
    async with served_camera(tmp_path, sound=False) as served:
        viewer = await watch(served.client, served.url, audio=False)
        try:
            await wait_until(lambda: len(viewer.sizes) >= 10, 15)
            service = served.runner.app[WHEP_KEY].service
            assert service is not None
            (session,) = service.sessions.values()
            video = session.streams[0]
            assert video.wire is None and video.sent > 0
            (sender, *_) = [s for s in session.pc.getSenders() if s.kind == "video"]
            (receiver, *_) = [t.receiver for t in viewer.pc.getTransceivers()
                              if t.kind == "video"]  # fmt: skip
            await receiver._send_rtcp_nack(sender._ssrc, [video._history.newest])
            await wait_until(lambda: video.resent == 1, 5)
        finally:
            await viewer.close()
