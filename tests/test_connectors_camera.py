"""The camera connector in real flows: virtual and file cameras, JPEGs and segments."""

from __future__ import annotations

import io
import itertools
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from connectors import CameraConnector
from connectors._jpeg import FfmpegJpegEncoder, TurboJpegEncoder, plane_views
from connectors._segments import SegmentEncoder, SegmentJob
from connectors._timeline import Epoch
from connectors._video_ports import JpegPacer
from devices import DeviceNotFound, UnsupportedMode
from mediaflow import FlowBuilder, FlowSession, load_flow
from tests.connector_helpers import (
    FAST,
    FlowResult,
    MediaSink,
    decode_video,
    make_video,
    run_flow,
)
from tests.engine_nodes import rss_bytes
from tests.test_devices_video import FAKE_CAMERAS

LAVFI_2S = "lavfi:testsrc2=size=320x240:rate=30,trim=duration=2"  # 60 frames, then the end


def camera_flow(name: str, device: str, *, ports: tuple[str, ...], **options: Any) -> FlowBuilder:
    inputs = {port: f"cam.{port}" for port in ports}
    return (
        FlowBuilder(name)
        .add("cam", "camera", device=device, **options)
        .add("sink", MediaSink, inputs=inputs)
    )


def assert_gap_free(result: FlowResult, port: str) -> None:
    seqs = [r.ref.meta["seq"] for r in result.port(port)]
    assert seqs == list(range(len(seqs))), seqs


def assert_jpegs(result: FlowResult, size: tuple[int, int], count: int) -> None:
    images = result.port("image")
    assert len(images) == count
    assert_gap_free(result, "image")
    for item in images:
        assert item.ref.media_type == "image/jpeg"
        meta = item.ref.meta
        assert (meta["width"], meta["height"], meta["codec"]) == (*size, "jpeg")
        assert meta["source"] == "cam" and "discontinuity" not in meta
        with av.open(io.BytesIO(item.data), "r") as container:
            (frame,) = list(container.decode(video=0))
        assert (frame.width, frame.height) == size
    pts = [r.ref.meta["pts"] for r in images]
    assert all(b > a for a, b in itertools.pairwise(pts))


def assert_segments(
    result: FlowResult, *, codec: str, size: tuple[int, int], frames: int, count: int
) -> None:
    segments = result.port("video")
    assert len(segments) == count
    assert_gap_free(result, "video")
    media_type, container_name = {
        "h264": ("video/mp4", "mov,mp4,m4a,3gp,3g2,mj2"),
        "vp8": ("video/webm", "matroska,webm"),
        "vp9": ("video/webm", "matroska,webm"),
    }[codec]
    for index, item in enumerate(segments):
        meta = item.ref.meta
        assert item.ref.media_type == media_type
        assert (meta["codec"], meta["width"], meta["height"], meta["fps"]) == (codec, *size, 30.0)
        name, decoded = decode_video(item.data)
        assert name == container_name
        assert abs(len(decoded) - frames) <= 1 and meta["frames"] == len(decoded)
        assert decoded[0].key_frame and decoded[0].time == 0.0
        # Decoders and lavfi mark every frame as a keyframe; encoded as such, every frame
        # would be an I-frame. (x264 may add one at a scene cut.)
        assert sum(f.key_frame for f in decoded) <= len(decoded) // 10
        assert (decoded[0].width, decoded[0].height) == size
        assert meta["pts"] == pytest.approx(index * frames / 30, abs=1e-3)
        assert meta["duration"] == pytest.approx(len(decoded) / 30, abs=1e-3)


@pytest.mark.parametrize("codec", ["h264", "vp8", "vp9"])
async def test_virtual_camera_emits_jpegs_at_fps_and_playable_segments(
    tmp_path: Path, codec: str
) -> None:
    flow = camera_flow(
        "virtual", LAVFI_2S, ports=("image", "video"),
        fps=15, realtime=False, segment_s=1.0, codec=codec,
    )  # fmt: skip
    result = await run_flow(flow, tmp_path)
    assert_jpegs(result, (320, 240), count=30)  # 60 frames at 30 fps, emitted at 15
    assert_segments(result, codec=codec, size=(320, 240), frames=30, count=2)
    assert not result.of_type("frames_skipped")  # realtime=false waits, never skips


async def test_file_camera_relative_to_the_flow_file_with_a_resize(tmp_path: Path) -> None:
    make_video(tmp_path / "clip.mp4", seconds=2.0)  # 60 frames, 320x240 at 30 fps
    flow_file = tmp_path / "flow.toml"
    flow_file.write_text(
        '[flow]\nname = "filecam"\n\n'
        '[[node]]\nid = "cam"\nconnector = "camera"\ndevice = "file:clip.mp4"\n'
        'fps = 10\nsize = "160x120"\nrealtime = false\nsegment_s = 2.0\n\n'
        '[[node]]\nid = "sink"\nuse = "tests.connector_helpers:MediaSink"\n'
        'inputs = { image = "cam.image", video = "cam.video" }\n'
    )
    session = FlowSession(load_flow(flow_file), tmp_path / "data", settings=FAST)
    await session.start()
    assert await session.wait(until_idle=True) == "idle"
    await session.stop()
    result = FlowResult(session, [], dict(MediaSink.received))
    MediaSink.received.clear()
    assert_jpegs(result, (160, 120), count=20)
    assert_segments(result, codec="h264", size=(160, 120), frames=60, count=1)


async def test_mjpeg_camera_jpegs_pass_through_byte_for_byte(tmp_path: Path) -> None:
    clip = make_video(tmp_path / "cam.mkv", seconds=1.0, codec="mjpeg")
    with av.open(str(clip)) as container:
        packets = [bytes(p) for p in container.demux(video=0) if p.size]
    flow = camera_flow("mjpeg", f"file:{clip}", ports=("image", "video"), fps=30, realtime=False)
    result = await run_flow(flow, tmp_path / "data")
    assert [r.data for r in result.port("image")] == packets  # no decode, no re-encode
    assert_segments(result, codec="h264", size=(320, 240), frames=30, count=1)


@pytest.mark.parametrize(("video", "segments"), [(None, 0), (False, 0), (True, 1)])
async def test_segments_are_encoded_only_when_video_is_read(
    tmp_path: Path, video: bool | None, segments: int
) -> None:
    flow = camera_flow("noread", LAVFI_2S, ports=("image",), fps=5, realtime=False, video=video)
    result = await run_flow(flow, tmp_path)
    assert len(result.port("image")) == 10
    node = result.session.node("cam")
    assert isinstance(node, CameraConnector) and node.video_run is not None
    assert node.video_run.statistics()["segments"] == segments
    assert (result.latest("cam", "video") is not None) == bool(segments)


async def test_slow_encoding_skips_frames_at_the_capture_edge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    push = SegmentEncoder.push

    def slow_push(self: SegmentEncoder, job: Any) -> Any:
        time.sleep(0.05)  # an encoder that manages 20 fps, fed 60 fps
        return push(self, job)

    monkeypatch.setattr(SegmentEncoder, "push", slow_push)
    flow = camera_flow(
        "slow", "lavfi:testsrc2=size=640x480:rate=60", ports=("image", "video"), fps=5
    )
    before = rss_bytes()
    result = await run_flow(flow, tmp_path, for_s=2.5)
    node = result.session.node("cam")
    assert isinstance(node, CameraConnector) and node.video_run is not None
    stats = node.video_run.statistics()
    skipped, encoded = stats["skipped"]["video"], stats["segment_frames"]
    assert skipped > 40 and encoded > 20, stats  # ~150 frames offered, ~50 encoded
    assert stats["segments"] >= 1
    reports = result.of_type("frames_skipped")
    assert reports and reports[-1].data["video"] == skipped
    assert all(e.data["device"] == "lavfi:testsrc2=size=640x480:rate=60" for e in reports)
    assert len(reports) <= 5  # about one a second, not one per frame
    assert_gap_free(result, "image")
    assert rss_bytes() - before < 60 * 2**20  # bounded: frames are skipped, not queued


# -- configuration errors fail the flow at start ---------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "listed"),
    [
        ({"device": "/dev/video9"}, DeviceNotFound, "/dev/video0 (HD Webcam C270)"),
        ({"device": "/dev/video0", "size": "1920x1080"}, UnsupportedMode, "640x480@30"),
    ],
)
async def test_a_device_it_cannot_open_fails_the_flow_at_start_listing_what_exists(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, Any],
    error: type[Exception],
    listed: str,
) -> None:
    monkeypatch.setattr("devices.video_input.list_cameras", lambda: FAKE_CAMERAS)
    flow = FlowBuilder("bad").add("cam", "camera", **options)
    session = FlowSession(flow.build(), tmp_path, settings=FAST)
    with pytest.raises(error) as caught:
        await session.start()
    assert listed in str(caught.value) and "available" in str(caught.value)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"fps": 0}, "fps must be positive"),
        ({"size": "big"}, "size must look like"),
        ({"codec": "av1"}, "codec must be one of auto, h264, h265, vp8, vp9"),
        ({"copy": True, "codec": "vp9"}, "copy = true keeps H.264 or H.265"),
        ({"copy": False, "codec": "h265"}, "does not encode H.265"),
        ({"transport": "quic"}, "transport must be"),
        ({"quality": 101}, "quality must be within 1-100"),
        ({"reconnect_base_s": 5, "reconnect_max_s": 1}, "reconnect delays"),
        ({"live_part_s": 0.05}, "live_part_s must be within 0.1-10 seconds"),
        ({"codec": "vp8", "live_audio": "mic"}, "live_audio needs codec = 'h264'"),
        ({"live_audio": ""}, "live_audio must be the id of a node with sound"),
    ],
)
def test_bad_options_are_refused_with_their_name(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CameraConnector(device="/dev/video0", **options)


def test_copying_cannot_resize_a_file_or_a_stream() -> None:
    # A capture device's size is asked of the device; anything else is resized.
    CameraConnector(device="/dev/video0", size="320x240", copy=True)
    for device in ("file:x.mp4", "rtsp://127.0.0.1:8554/cam"):
        with pytest.raises(ValueError, match="cannot resize"):
            CameraConnector(device=device, size="320x240", copy=True)


async def test_capture_options_on_a_virtual_camera_fail_at_start(tmp_path: Path) -> None:
    flow = FlowBuilder("rate").add("cam", "camera", device=LAVFI_2S, rate=30)
    session = FlowSession(flow.build(), tmp_path, settings=FAST)
    with pytest.raises(ValueError, match="rate and input_format only apply to capture"):
        await session.start()


# -- the pure parts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fps", "frame_pts", "emitted"),
    [
        (15, [i / 30 for i in range(8)], [0, 2, 4, 6]),  # every other frame
        (30, [i / 30 for i in range(4)], [0, 1, 2, 3]),  # every frame
        (50, [i / 30 for i in range(4)], [0, 1, 2, 3]),  # never more than there is
        (15, [0.0, 0.031, 0.064, 0.1, 0.135], [0, 2, 4]),  # jitter: 3 ms early still counts
        (10, [0.0, 0.1, 5.0, 5.05, 5.1], [0, 1, 2, 4]),  # after a gap: no burst
    ],
)
def test_jpeg_pacer(fps: float, frame_pts: list[float], emitted: list[int]) -> None:
    pacer = JpegPacer(fps, frame_interval=1 / 30)
    assert [i for i, pts in enumerate(frame_pts) if pacer.due(pts)] == emitted


def gray_frame(y: int, fmt: str) -> av.VideoFrame:
    """A flat 64x48 frame of luma ``y`` and neutral chroma."""
    planes = np.zeros((48 * 3 // 2, 64), dtype=np.uint8)
    planes[:48] = y
    planes[48:] = 128
    return av.VideoFrame.from_ndarray(planes, format=fmt)


@pytest.mark.parametrize("encoder_class", [TurboJpegEncoder, FfmpegJpegEncoder])
@pytest.mark.parametrize(
    ("y", "fmt", "decoded_y"),
    [
        (16, "yuv420p", 0),  # limited-range black becomes JPEG black
        (235, "yuv420p", 255),  # and limited-range white JPEG white
        (128, "yuv420p", 130),
        (0, "yuvj420p", 0),  # full range goes through untouched
        (200, "yuvj420p", 200),
    ],
)
def test_jpeg_encoders_write_full_range_jpeg(
    encoder_class: type[TurboJpegEncoder | FfmpegJpegEncoder], y: int, fmt: str, decoded_y: int
) -> None:
    encoder = encoder_class(85, size=(32, 24))
    frame = gray_frame(y, fmt)
    # The same frame (or pts) twice, as after a reconnect, must encode twice.
    assert encoder.encode(frame) == encoder.encode(frame)
    data = encoder.encode(frame)
    with av.open(io.BytesIO(data), "r") as container:
        (frame,) = list(container.decode(video=0))
    assert (frame.width, frame.height) == (32, 24)
    assert frame.format.name.startswith("yuvj")
    assert abs(int(np.median(plane_views(frame)[0])) - decoded_y) <= 2


def test_segment_encoder_keeps_capture_timing_across_skipped_frames() -> None:
    encoder = SegmentEncoder("h264", segment_s=1.0, fps=30.0)
    epoch = Epoch(0, 0.0, None)
    kept = [i for i in range(45) if i % 3 != 1]  # a third skipped at the capture edge
    out = []
    for i in kept:
        frame = gray_frame(i * 5 % 255, "yuv420p")
        frame.pts, frame.time_base = i, Fraction(1, 30)
        out += encoder.push(SegmentJob(frame, None, i / 30, 1000.0 + i / 30, epoch))
    out += encoder.flush()
    assert [s.frames for s in out] == [20, 10]  # frames 0-29 and 30-44
    _, decoded = decode_video(out[0].data)
    times = [round(float(f.time) * 30) for f in decoded]
    assert times == [i for i in kept if i < 30]  # gaps stay gaps, not a speed-up
    assert out[1].pts == 1.0 and out[1].captured_at == 1001.0


def test_two_lanes_converting_one_shared_frame_do_not_deadlock() -> None:
    """PyAV keeps a converter on each frame; the lanes must not share it (they did, and
    a camera with a resize and segments on hung within seconds)."""
    with av.open("testsrc2=size=320x240:rate=30", format="lavfi") as source:
        frames = [f for _, f in zip(range(30), source.decode(video=0), strict=False)]
    jpeg = TurboJpegEncoder(85, size=(160, 120))
    segments = SegmentEncoder("h264", segment_s=10.0, fps=30.0, size=(160, 120))
    epoch = Epoch(0, 0.0, None)

    def encode_jpegs() -> None:
        for _ in range(10):
            for frame in frames:
                jpeg.encode(frame)

    def encode_segments() -> None:
        for i, frame in enumerate(frames * 10):
            segments.push(SegmentJob(frame, None, i / 30, 0.0, epoch))
        segments.flush()

    workers = [threading.Thread(target=f, daemon=True) for f in (encode_jpegs, encode_segments)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert not any(worker.is_alive() for worker in workers)
