"""Microphone and file connectors in real flows: virtual, file and PortAudio capture."""

from __future__ import annotations

import asyncio
import itertools
import shutil
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from av.audio.stream import AudioStream
from av.video.stream import VideoStream

from connectors import FileConnector, MicrophoneConnector
from mediaflow import FlowBuilder, FlowSession
from tests.connector_helpers import (
    FAST,
    FlowResult,
    MediaSink,
    dominant_hz,
    rms,
    run_flow,
    sink_has,
    wav_pcm,
    write_tone,
)
from tests.pulse import PulseServer
from tests.pulse import pulse_server as pulse_server_fixture  # noqa: F401


def mic_flow(name: str, device: str, **options: Any) -> FlowBuilder:
    return (
        FlowBuilder(name)
        .add("mic", "microphone", device=device, **options)
        .add("sink", MediaSink, inputs={"audio": "mic.audio"})
    )


def assert_chunks(
    result: FlowResult, *, rate: int, channels: int, chunk_ms: int, count: int | None = None
) -> np.ndarray:
    """Every chunk is a WAV of exactly chunk_ms, gap-free; returns all the PCM."""
    chunks = result.port("audio")
    if count is not None:
        assert len(chunks) == count
    metas = [c.ref.meta for c in chunks]
    assert [m["seq"] for m in metas] == list(range(len(chunks)))
    pcm = []
    for item, meta in zip(chunks, metas, strict=True):
        assert item.ref.media_type == "audio/wav"
        assert (meta["rate"], meta["channels"]) == (rate, channels)
        assert meta["duration"] == pytest.approx(chunk_ms / 1000)
        assert meta["overflows"] == 0 and "discontinuity" not in meta
        got_rate, got_channels, samples = wav_pcm(item.data)
        assert (got_rate, got_channels, samples.shape[0]) == (
            rate,
            channels,
            rate * chunk_ms // 1000,
        )
        pcm.append(samples)
    for a, b in itertools.pairwise(metas):
        assert b["pts"] == pytest.approx(a["pts"] + chunk_ms / 1000)
    return np.concatenate(pcm)


async def test_virtual_microphone_chunks_are_exact(tmp_path: Path) -> None:
    flow = mic_flow(
        "tone", "lavfi:sine=frequency=440:sample_rate=16000:duration=1",
        realtime=False, chunk_ms=100,
    )  # fmt: skip
    result = await run_flow(flow, tmp_path)
    pcm = assert_chunks(result, rate=16000, channels=1, chunk_ms=100, count=10)
    assert dominant_hz(pcm, 16000) == pytest.approx(440, abs=3)


async def test_file_microphone_is_resampled_and_ends(tmp_path: Path) -> None:
    tone = write_tone(tmp_path / "tone.wav", seconds=1.2, hz=1000, rate=44100, channels=2)
    flow = mic_flow("file", f"file:{tone}", rate=8000, channels=2, chunk_ms=40, realtime=False)
    result = await run_flow(flow, tmp_path / "data")
    pcm = assert_chunks(result, rate=8000, channels=2, chunk_ms=40, count=30)
    assert dominant_hz(pcm, 8000) == pytest.approx(1000, abs=5)


async def test_a_looping_file_microphone_starts_again_and_keeps_counting(
    tmp_path: Path,
) -> None:
    tone = write_tone(tmp_path / "tone.wav", seconds=0.5, hz=1000, rate=16000, channels=1)
    flow = mic_flow("loop", f"file:{tone}", chunk_ms=100, realtime=False, loop=True)
    result = await run_flow(flow, tmp_path / "data", until=sink_has("audio", 12))
    metas = [c.ref.meta for c in result.port("audio")]
    assert len(metas) >= 12  # the 5 chunks of the file, and again, and again
    assert [m["seq"] for m in metas] == list(range(len(metas)))
    pts = [m["pts"] for m in metas]
    assert pts == sorted(pts) and pts[10] == pytest.approx(1.0)
    assert not [e for e in result.events if e.type == "device_lost"]


async def test_real_capture_from_portaudio_hears_the_tone(
    pulse_server: PulseServer, tmp_path: Path
) -> None:
    if shutil.which("paplay") is None:
        pytest.skip("paplay is not installed (apt-get install pulseaudio-utils)")
    tone = write_tone(tmp_path / "tone.wav", seconds=1.5, rate=48000)
    session = FlowSession(mic_flow("live", "default").build(), tmp_path / "data", settings=FAST)
    await session.start()
    try:
        while session.snapshot().latest.get(("mic", "audio")) is None:  # the stream runs
            await asyncio.sleep(0.02)
        player = pulse_server.play(tone)
        _, stderr = await asyncio.to_thread(player.communicate, timeout=10)
        assert player.returncode == 0, stderr
        await asyncio.sleep(0.3)  # the tail of the tone reaches the monitor source
        node = session.node("mic")
        assert isinstance(node, MicrophoneConnector) and node.audio_run is not None
        emitted = node.audio_run.chunks.emitted
        while len(MediaSink.received["sink"]) < emitted:  # let the sink catch up
            await asyncio.sleep(0.02)
    finally:
        await session.stop()
    result = FlowResult(session, [], dict(MediaSink.received))
    MediaSink.received.clear()
    pcm_chunks = [wav_pcm(r.data)[2] for r in result.port("audio")]
    assert len(pcm_chunks) >= 15
    pcm = assert_chunks(result, rate=16000, channels=1, chunk_ms=100)
    loud = [p for p in pcm_chunks if rms(p) > 1000]
    assert len(loud) >= 10, [round(rms(p)) for p in pcm_chunks]
    assert dominant_hz(np.concatenate(loud), 16000) == pytest.approx(440, abs=5)
    assert pcm.shape[1] == 1


# -- the file connector: ports follow what the file holds ------------------------------------


def make_av_file(path: Path, *, seconds: float, fps: int = 30, rate: int = 48000) -> Path:
    """A real MP4 with an H.264 picture and an AAC 440 Hz tone."""
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=fps)
        assert isinstance(video, VideoStream)
        video.width, video.height, video.pix_fmt = 160, 120, "yuv420p"
        video.options = {"preset": "ultrafast"}
        audio = out.add_stream("aac", rate=rate)
        assert isinstance(audio, AudioStream)
        for i in range(int(seconds * fps)):
            rgb = np.full((120, 160, 3), i * 4 % 256, dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        t = np.arange(int(seconds * rate)) / rate
        samples = (np.sin(2 * np.pi * 440 * t) * 0.5).astype(np.float32)
        for start in range(0, len(samples), 1024):
            block = samples[start : start + 1024]
            aframe = av.AudioFrame.from_ndarray(block[None, :], format="fltp", layout="mono")
            aframe.sample_rate, aframe.pts = rate, start
            aframe.time_base = Fraction(1, rate)
            out.mux(audio.encode(aframe))
        out.mux(audio.encode(None))
    return path


async def test_file_connector_replays_picture_video_and_sound(tmp_path: Path) -> None:
    clip = make_av_file(tmp_path / "av.mp4", seconds=2.0)
    assert FileConnector.ports({"path": str(clip)}) == (
        {}, {"image": "image", "video": "video", "audio": "audio"},
    )  # fmt: skip
    flow = (
        FlowBuilder("replay")
        .add("clip", "file", path=str(clip), realtime=False, fps=5, segment_s=1.0)
        .add("sink", MediaSink,
             inputs={"image": "clip.image", "video": "clip.video", "audio": "clip.audio"})
    )  # fmt: skip
    result = await run_flow(flow, tmp_path / "data")
    assert len(result.port("image")) == 10
    # The file's H.264 is copied: its one group of pictures (x264 puts keyframes 250
    # frames apart) is one segment, however short segment_s is, with the file's sound.
    segments = [r.ref.meta for r in result.port("video")]
    assert [(m["frames"], m["copied"], m["audio_codec"]) for m in segments] == [(60, True, "aac")]
    chunks = result.port("audio")
    assert len(chunks) in (20, 21)  # 2 s of AAC, plus the encoder's priming samples
    pcm = np.concatenate([wav_pcm(c.data)[2] for c in chunks])
    assert dominant_hz(pcm, 16000) == pytest.approx(440, abs=3)


async def test_file_connector_paces_to_real_time_unless_told(tmp_path: Path) -> None:
    tone = write_tone(tmp_path / "tone.wav", seconds=1.0, rate=16000, channels=1)
    assert FileConnector.ports({"path": f"file:{tone}"}) == ({}, {"audio": "audio"})
    flow = (
        FlowBuilder("paced")
        .add("clip", "file", path=str(tone))
        .add("sink", MediaSink, inputs={"audio": "clip.audio"})
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run_flow(flow, tmp_path / "data")
    assert loop.time() - started >= 0.85  # 10 chunks of 100 ms, the first at once
    assert len(result.port("audio")) == 10


async def test_a_still_picture_is_one_jpeg(tmp_path: Path) -> None:
    picture = tmp_path / "still.png"
    frame = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), dtype=np.uint8), format="rgb24")
    with av.open(str(picture), "w", format="image2") as out:
        stream = out.add_stream("png", rate=1)
        assert isinstance(stream, VideoStream)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "rgb24"
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    assert FileConnector.ports({"path": str(picture)}) == ({}, {"image": "image"})
    flow = (
        FlowBuilder("still")
        .add("pic", "file", path=str(picture))
        .add("sink", MediaSink, inputs={"image": "pic.image"})
    )
    result = await run_flow(flow, tmp_path / "data")
    (image,) = result.port("image")
    assert (image.ref.meta["width"], image.ref.meta["height"]) == (64, 48)
    assert image.data[:2] == b"\xff\xd8"
