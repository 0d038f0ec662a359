"""Video inputs through the one open path: lavfi, files, passthrough, unplug, bad specs."""

from __future__ import annotations

import asyncio
import errno
import functools
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from av.video.stream import VideoStream

from devices.camera_modes import CameraFormat, FrameSize
from devices.cameras import CameraInfo
from devices.errors import DeviceLost, DeviceNotFound, EndOfStream, UnsupportedMode
from devices.video_input import CapturedFrame, VideoInput, open_video
from devices.video_spec import parse_video_spec


def make_video(path: Path, *, seconds: float, fps: int = 30, size: tuple[int, int] = (320, 240),
               codec: str = "libx264") -> Path:  # fmt: skip
    """A tiny real video file: a moving gradient."""
    width, height = size
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        assert isinstance(stream, VideoStream)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        if codec == "libx264":
            stream.options = {"preset": "ultrafast"}
        for i in range(int(seconds * fps)):
            rgb = np.zeros((height, width, 3), dtype=np.uint8)
            rgb[:, :, 0] = (np.arange(width) + i * 4) % 256
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_video(tmp_path_factory.mktemp("video") / "clip.mp4", seconds=1.0)


async def collect(source: VideoInput, limit: int | None = None) -> list[CapturedFrame]:
    frames: list[CapturedFrame] = []
    async with source:
        async for item in source:
            frames.append(item)
            if limit is not None and len(frames) >= limit:
                break
    return frames


def assert_clean_sequence(frames: list[CapturedFrame], size: tuple[int, int]) -> None:
    assert [f.index for f in frames] == list(range(len(frames)))
    assert all(b.pts > a.pts for a, b in itertools.pairwise(frames))
    assert frames[0].pts == 0.0
    for item in frames:
        assert item.frame is not None and (item.frame.width, item.frame.height) == size
        assert (item.width, item.height) == size


async def test_virtual_camera_from_lavfi_stops_when_closed() -> None:
    source = open_video("lavfi:testsrc2=size=320x240:rate=30", realtime=False)
    assert source.info.kind == "lavfi" and not source.info.is_live
    assert (source.info.width, source.info.height, source.info.fps) == (320, 240, 30.0)
    frames = await collect(source, limit=12)
    assert len(frames) == 12
    assert_clean_sequence(frames, (320, 240))
    assert frames[11].pts == pytest.approx(11 / 30)
    assert not source.running  # the endless graph's thread stopped on close


async def test_file_frames_then_end_of_stream(clip: Path) -> None:
    source = open_video(f"file:{clip}", realtime=False)
    assert source.info.codec == "h264" and source.info.duration == pytest.approx(1.0, abs=0.1)
    frames = []
    async with source:
        while True:
            try:
                frames.append(await source.read())
            except EndOfStream:
                break
    assert len(frames) == 30
    assert_clean_sequence(frames, (320, 240))
    assert frames[-1].pts == pytest.approx(29 / 30)


async def test_bare_path_opens_as_a_file(clip: Path) -> None:
    assert len(await collect(open_video(str(clip), realtime=False))) == 30


@pytest.mark.parametrize("spec_kind", ["file", "lavfi"])
async def test_realtime_pacing_on_and_off(clip: Path, spec_kind: str) -> None:
    spec = f"file:{clip}" if spec_kind == "file" else "lavfi:testsrc2=size=160x120:rate=30:d=1"
    started = time.monotonic()
    fast = await collect(open_video(spec, realtime=False))
    fast_s = time.monotonic() - started
    started = time.monotonic()
    paced = await collect(open_video(spec))  # default: realtime
    paced_s = time.monotonic() - started
    assert len(fast) == len(paced) == 30
    assert paced_s >= 0.7 * 1.0  # loosely: timing on a shared machine is noisy
    assert fast_s < paced_s / 2


@pytest.mark.parametrize("spec_kind", ["file", "lavfi"])
async def test_a_replayed_frame_is_captured_at_its_pts_however_fast(
    clip: Path, spec_kind: str
) -> None:
    """A file or a graph read as fast as it decodes keeps its frames' spacing on the wall
    clock (what motion and loudness time their events by), as its sound's chunks do."""
    spec = f"file:{clip}" if spec_kind == "file" else "lavfi:testsrc2=size=160x120:rate=30:d=1"
    before = time.time()
    frames = await collect(open_video(spec, realtime=False))
    first = frames[0].captured_at
    assert before <= first <= time.time()
    assert [round(f.captured_at - first, 6) for f in frames] == [round(f.pts, 6) for f in frames]
    assert frames[-1].pts == pytest.approx(29 / 30)


async def test_mjpeg_passthrough_yields_undecoded_jpeg(tmp_path: Path) -> None:
    path = make_video(tmp_path / "cam.mkv", seconds=0.2, codec="mjpeg")
    source = open_video(f"file:{path}", realtime=False, passthrough=True)
    assert source.info.passthrough and source.info.codec == "mjpeg"
    frames = await collect(source)
    assert len(frames) == 6 and [f.index for f in frames] == list(range(6))
    for item in frames:
        assert item.frame is None and item.packet is not None
        assert item.packet[:2] == b"\xff\xd8" and item.packet[-2:] == b"\xff\xd9"
        assert (item.width, item.height) == (320, 240)
    assert frames[1].pts == pytest.approx(1 / 30, abs=1e-3)  # Matroska counts in ms


async def test_passthrough_of_a_non_mjpeg_stream_decodes(clip: Path) -> None:
    source = open_video(f"file:{clip}", realtime=False, passthrough=True)
    assert not source.info.passthrough
    frames = await collect(source, limit=2)
    assert frames[0].frame is not None and frames[0].packet is None


# -- unplug and end of stream -----------------------------------------------------------


class UnpluggedAfter:
    """A real container whose demux fails like an unplugged V4L2 device after N packets."""

    def __init__(
        self, inner: Any, packets: int, error: BaseException | None = None, *, ends: bool = False
    ) -> None:
        self._inner = inner
        self._packets = packets
        self._error: BaseException | None = None
        if not ends:  # ends=True: the demuxer just stops, as a v4l2 read can after a yank
            self._error = error if error is not None else OSError(errno.ENODEV, "No such device")
        self.streams = inner.streams
        self.duration = inner.duration

    def demux(self, *args: Any) -> Iterator[Any]:
        for count, packet in enumerate(self._inner.demux(*args)):
            if count >= self._packets:
                if self._error is None:
                    return
                raise self._error
            yield packet

    def close(self) -> None:
        self._inner.close()


def lavfi_container() -> Any:
    return av.open("testsrc2=size=160x120:rate=30", format="lavfi")


async def test_unplugged_camera_raises_device_lost_not_end_of_stream() -> None:
    source = VideoInput(
        "v4l2:/dev/video0",
        UnpluggedAfter(lavfi_container(), 5),
        kind="v4l2",
        realtime=False,
        max_buffered=8,  # room for all five: this test is not about drops
    )
    assert source.info.is_live
    got = []
    with pytest.raises(DeviceLost) as caught:
        async with source:
            while True:
                got.append(await source.read())
    assert len(got) == 5
    assert caught.value.spec == "v4l2:/dev/video0"
    assert isinstance(caught.value.cause, OSError) and caught.value.cause.errno == errno.ENODEV


async def test_camera_that_stops_delivering_is_lost_too() -> None:
    wrapped = UnpluggedAfter(lavfi_container(), 3, ends=True)
    source = VideoInput("/dev/video0", wrapped, kind="v4l2", realtime=False)
    with pytest.raises(DeviceLost) as caught:
        await collect(source)
    assert isinstance(caught.value.cause, EOFError)


async def test_file_read_error_is_raised_as_is(clip: Path) -> None:
    broken = UnpluggedAfter(av.open(str(clip)), 4, av.error.InvalidDataError(errno.EIO, "bad"))
    source = VideoInput(f"file:{clip}", broken, kind="file", realtime=False)
    with pytest.raises(av.error.InvalidDataError):
        await collect(source)


async def test_live_source_drops_oldest_when_consumer_is_slow() -> None:
    source = VideoInput(
        "v4l2:/dev/video0",
        UnpluggedAfter(lavfi_container(), 40),
        kind="v4l2",
        realtime=False,
        max_buffered=2,
    )
    source.start()
    deadline = time.monotonic() + 5
    while source.statistics().produced < 40 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    got = []
    with pytest.raises(DeviceLost):
        while True:
            got.append(await source.read())
    await source.aclose()
    stats = source.statistics()
    assert stats.bridge.policy == "drop_oldest" and stats.bridge.dropped == 38
    assert [f.index for f in got] == [38, 39]  # the newest survive, gaps show the drops


# -- specs and configuration errors ------------------------------------------------------

FAKE_CAMERAS = [
    CameraInfo(
        name="HD Webcam C270",
        device="/dev/video0",
        spec="/dev/video0",
        backend="v4l2",
        by_id=("/dev/v4l/by-id/usb-046d_C270-video-index0",),
        formats=(CameraFormat("MJPG", sizes=(FrameSize(640, 480, (30.0,)),)),),
    ),
    CameraInfo(name="USB Video", device="/dev/video2", spec="/dev/video2", backend="v4l2"),
]


def test_unknown_camera_lists_the_available_ones() -> None:
    with pytest.raises(DeviceNotFound) as caught:
        open_video("/dev/video9", cameras=FAKE_CAMERAS)
    message = str(caught.value)
    assert "/dev/video9" in message
    assert "/dev/video0 (HD Webcam C270)" in message and "/dev/video2 (USB Video)" in message


def test_unknown_camera_on_this_machine_says_none_available() -> None:
    with pytest.raises(DeviceNotFound, match="available: none"):
        open_video("v4l2:/dev/video63")


@pytest.mark.parametrize(
    ("kwargs", "requested"),
    [
        ({"size": (1920, 1080)}, "size 1920x1080"),
        ({"size": (640, 480), "fps": 60.0}, "rate 60 fps"),
        ({"input_format": "h264"}, "input_format 'h264'"),
    ],
)
def test_unsupported_mode_lists_what_the_camera_offers(
    kwargs: dict[str, Any], requested: str
) -> None:
    spec = "/dev/v4l/by-id/usb-046d_C270-video-index0"  # the stable name resolves too
    with pytest.raises(UnsupportedMode) as caught:
        open_video(spec, cameras=FAKE_CAMERAS, **kwargs)
    assert requested in str(caught.value) and "mjpeg: 640x480@30" in str(caught.value)


def test_missing_file_is_device_not_found(tmp_path: Path) -> None:
    with pytest.raises(DeviceNotFound, match="no such file"):
        open_video(f"file:{tmp_path / 'nope.mp4'}")


@pytest.mark.parametrize(
    ("spec", "kwargs", "kind", "fmt", "options"),
    [
        ("/dev/video0", {}, "v4l2", "v4l2", {}),
        (
            "v4l2:/dev/video2",
            {"size": (1280, 720), "fps": 30, "input_format": "mjpeg"},
            "v4l2",
            "v4l2",
            {"video_size": "1280x720", "framerate": "30", "input_format": "mjpeg"},
        ),
        ("avfoundation:0", {"fps": 30}, "avfoundation", "avfoundation", {"framerate": "30"}),
        (
            "dshow:video=USB Camera",
            {"input_format": "mjpeg"},
            "dshow",
            "dshow",
            {"vcodec": "mjpeg"},
        ),
        ("lavfi:testsrc2", {}, "lavfi", "lavfi", {}),
        ("rtsp://127.0.0.1:8554/cam", {}, "url", None, {"rtsp_transport": "tcp"}),
        ("http://127.0.0.1:8080/video.mjpg", {}, "url", None, {}),
    ],
)
def test_parse_video_spec(
    spec: str, kwargs: dict[str, Any], kind: str, fmt: str | None, options: dict[str, str]
) -> None:
    source = parse_video_spec(spec, **kwargs)
    assert (source.kind, source.format, source.options) == (kind, fmt, options)
    assert source.is_live == (kind != "lavfi")
    if kind == "url":
        assert source.timeout == (10.0, 10.0)


@pytest.mark.parametrize(
    ("spec", "kwargs", "match"),
    [
        ("", {}, "empty"),
        ("lavfi:testsrc2", {"size": (320, 240)}, "only apply to capture devices"),
        ("file:x.mp4", {"fps": 10}, "only apply to capture devices"),
        ("/dev/video0", {"fps": 0}, "fps must be positive"),
        ("webcam please", {}, "cannot tell what"),
        ("lavfi:", {}, "nothing after"),
    ],
)
def test_parse_video_spec_refuses(spec: str, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_video_spec(spec, **kwargs)


# -- network streams over loopback ----------------------------------------------------------


@pytest.fixture
def http_server(clip: Path) -> Iterator[str]:
    """Serves the clip's directory on a loopback port; yields the clip's URL."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return None

    handler = functools.partial(Quiet, directory=str(clip.parent))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{clip.name}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_http_stream_is_live_and_ends_with_end_of_stream(http_server: str) -> None:
    source = await asyncio.to_thread(open_video, http_server)
    assert source.info.is_live and source.info.kind == "url"
    frames = await collect(source)
    assert frames and frames[-1].index == 29  # newest kept; older ones may have been dropped
    assert all(b.index > a.index for a, b in itertools.pairwise(frames))
    assert source.statistics().bridge.dropped == 30 - len(frames)


def test_unreachable_stream_is_device_not_found() -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(DeviceNotFound, match="refused"):
        open_video(f"http://127.0.0.1:{port}/cam.mjpg")
