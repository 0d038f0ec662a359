"""WebRTC sound of a copied IP camera (issue 30): GStreamer's RTSP server sends H.264
and AAC (or G.711, which the camera makes AAC once); the camera's packets are
copied, and its own AAC is decoded and encoded to Opus once, however many WHEP
viewers listen. aiortc's viewers decode what arrives: the file's 440 Hz tone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mediaflow import FlowBuilder
from mediaflow.live.fanout import CameraOpus
from mediaflow.server.whep import WHEP as WHEP_KEY
from tests.http_support import wait_until
from tests.rtsp_server import AudioCodec, Mount, RtspServerFactory, rtsp_media
from tests.whep_support import FLOW, served_camera, watch

pytestmark = pytest.mark.timeout(90)

TONE_HZ = 440  # rtsp_media's sine


@pytest.mark.parametrize("sound", ["aac", "pcmu"])  # G.711 becomes AAC once, at 8 kHz
async def test_two_viewers_hear_a_copied_cameras_own_sound_encoded_once(
    tmp_path: Path, rtsp_server: RtspServerFactory, sound: AudioCodec
) -> None:
    server = rtsp_server(Mount(media=rtsp_media("h264"), audio=sound))
    flow = FlowBuilder(FLOW).add(
        "cam", "camera", device=server.url(), image=False, video=True, segment_s=1, timeout_s=5
    )
    async with served_camera(tmp_path, flow=flow) as served:
        feed = served.state.live.feed(FLOW, "cam")
        assert feed is not None and feed.own_sound and feed.sound_from is None
        viewers = [await watch(served.client, served.url) for _ in range(2)]
        try:
            await wait_until(
                lambda: all(v.audio_frames >= 60 and len(v.sizes) >= 10 for v in viewers), 30
            )
            service = served.runner.app[WHEP_KEY].service
            assert service is not None
            (fanout,) = service.fanouts.sound.values()  # one for both viewers
            assert isinstance(fanout, CameraOpus)
            assert fanout.failed is None and fanout.malformed == 0
            for session in service.sessions.values():
                audio = session.streams[1]
                assert audio.kind == "audio" and 0 < audio.sent <= fanout.encoded
            for viewer in viewers:
                assert abs(_loudest_hz(viewer.sound) - TONE_HZ) < 10
        finally:
            for viewer in viewers:
                async with served.client.delete(served.url + viewer.location) as resp:
                    assert resp.status == 204
                await viewer.close()
        assert service.fanouts.sound == {}, "the last viewer gone, nothing is decoded"


def _loudest_hz(frames: list[np.ndarray], rate: int = 48000) -> float:
    """The frequency of the strongest tone in aiortc's decoded frames (s16, 48 kHz,
    interleaved stereo): its first channel's spectrum peak."""
    samples = np.concatenate([f.reshape(-1, 2)[:, 0] for f in frames]).astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum))])
