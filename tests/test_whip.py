"""WHIP ingest with aiortc as the publisher: a ``webrtc`` node emits what it sends.

Each test runs a real flow and server in this process and publishes lavfi's test
picture and a 440 Hz tone over WebRTC (loopback host candidates, no STUN).
"""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest

from mediaflow import FlowBuilder
from tests.connector_helpers import MediaSink, decode_video, wav_pcm
from tests.whip_helpers import AUTH, publish, whip_rig

pytest.importorskip("aiortc")
pytestmark = pytest.mark.timeout(60)


def recorded_flow(name: str) -> FlowBuilder:
    return (
        FlowBuilder(name)
        .add("phone", "webrtc", fps=5, segment_s=1.0, video=True)
        .add("rec", "recorder", inputs={"video": "phone.video", "audio": "phone.audio"}, clip_s=2)
        .add(
            "sink",
            MediaSink,
            inputs={"image": "phone.image", "video": "phone.video", "audio": "phone.audio"},
        )
        .add("clips", MediaSink, inputs={"video": "rec.video"})
    )


async def test_a_publisher_becomes_images_segments_chunks_and_a_recorded_clip(
    tmp_path: Path,
) -> None:
    async with whip_rig(recorded_flow("whipped"), tmp_path) as rig:
        publisher = await publish(rig, "/whip/whipped/phone")
        try:
            assert publisher.location.startswith("/whip/whipped/phone/")
            await rig.until(
                lambda: (
                    len(rig.received("image")) >= 3
                    and len(rig.received("video")) >= 2
                    and len(rig.received("audio")) >= 10
                    and len(rig.received("video", "clips")) >= 1
                ),
                timeout=20,
            )
        finally:
            await publisher.close()
        images = rig.received("image")
        segments = rig.received("video")
        chunks = rig.received("audio")
        clips = rig.received("video", "clips")
    for image in images[:3]:
        assert image.ref.media_type == "image/jpeg"
        assert (image.ref.meta["width"], image.ref.meta["height"]) == (320, 240)
        with av.open(io.BytesIO(image.data)) as jpeg:
            assert next(jpeg.decode(video=0)).width == 320
    assert [s.ref.meta["seq"] for s in segments[:2]] == [0, 1]
    for segment in segments[:2]:
        assert segment.ref.media_type == "video/mp4"
        fmt, frames = decode_video(segment.data)
        assert fmt.startswith("mov,mp4") and len(frames) >= 5
        assert (frames[0].width, frames[0].height) == (320, 240)
    for chunk in chunks[:10]:
        rate, channels, pcm = wav_pcm(chunk.data)
        assert (rate, channels, len(pcm)) == (16000, 1, 1600)
    loud = [wav_pcm(c.data)[2] for c in chunks[5:10]]
    assert max(int(np.abs(block.astype(np.int32)).max()) for block in loud) > 1000  # the tone
    clip = clips[0]
    assert clip.ref.meta["audio_codec"] == "aac"
    with av.open(io.BytesIO(clip.data)) as container:
        assert container.streams.video and container.streams.audio
        assert len(list(container.decode(video=0))) >= 10


async def test_a_publisher_without_sound_is_live_with_its_video_only(tmp_path: Path) -> None:
    """A live view waits for the sound it is told it carries: a publisher that sends
    none is live with its picture alone."""
    async with whip_rig(recorded_flow("mute"), tmp_path) as rig:
        publisher = await publish(rig, "/whip/mute/phone", audio=False)
        try:
            await rig.until(lambda: len(rig.received("video")) >= 1, timeout=20)
            async with rig.http.get(rig.url("/live/mute/phone.m3u8"), headers=AUTH) as playlist:
                assert playlist.status == 200, await playlist.text()
            feed = rig.session.live.feed("mute", "phone")
            assert feed is not None and feed.init is not None and feed.sound_from is None
            assert feed.codec is not None and "mp4a" not in feed.codec
        finally:
            await publisher.close()
