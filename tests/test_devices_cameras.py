"""Camera enumeration on a fake sysfs tree, the V4L2 ioctls against a fake driver,
mode checks, FFmpeg device-list parsing and ``describe_devices``."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from devices import v4l2
from devices.camera_modes import CameraFormat, FrameSize, SizeRange, check_mode
from devices.cameras import list_cameras, parse_ffmpeg_device_list
from devices.describe import describe_devices
from devices.errors import PortAudioMissing, UnsupportedMode

MJPEG = CameraFormat(
    "MJPG",
    "Motion-JPEG",
    compressed=True,
    sizes=(FrameSize(640, 480, (30.0, 15.0)), FrameSize(1280, 720, (30.0,))),
)
YUYV = CameraFormat("YUYV", "YUYV 4:2:2", sizes=(FrameSize(640, 480, (), (5.0, 30.0)),))


def build_fake_v4l2(root: Path) -> tuple[Path, Path, Path]:
    """Two UVC cameras (one with a metadata node), a subdev, by-id links.

    Returns ``(sysfs_root, by_id_root, dev_root)``.
    """
    sysfs = root / "sys" / "class" / "video4linux"
    usb = root / "sys" / "devices" / "pci0000:00" / "0000:00:14.0" / "usb1"
    bus_usb = root / "sys" / "bus" / "usb"
    bus_usb.mkdir(parents=True)
    dev = root / "dev"
    by_id = dev / "v4l" / "by-id"
    by_id.mkdir(parents=True)

    def usb_device(port: str, vendor: str, product: str) -> Path:
        interface = usb / port / f"{port}:1.0"
        interface.mkdir(parents=True)
        (usb / port / "idVendor").write_text(vendor + "\n")
        (usb / port / "idProduct").write_text(product + "\n")
        (interface / "subsystem").symlink_to(bus_usb)
        return interface

    def node(name: str, label: str, index: int, device: Path | None) -> None:
        path = sysfs / name
        path.mkdir(parents=True)
        (path / "name").write_text(label + "\n")
        (path / "index").write_text(f"{index}\n")
        if device is not None:
            (path / "device").symlink_to(device)

    webcam = usb_device("1-2", "046d", "0825")
    grabber = usb_device("1-3", "534d", "2109")
    node("video0", "HD Webcam C270", 0, webcam)
    node("video1", "HD Webcam C270", 1, webcam)  # UVC metadata node
    node("video10", "USB Video", 0, grabber)  # sorts after video2 by number
    node("video11", "USB Video", 1, grabber)
    node("v4l-subdev0", "sensor", 0, None)
    for link, target in [
        ("usb-046d_C270_2A4F-video-index0", "video0"),
        ("usb-046d_C270_2A4F-video-index1", "video1"),
        ("usb-MACROSILICON_USB_Video-video-index0", "video10"),
    ]:
        (by_id / link).symlink_to(Path("..") / ".." / target)
    return sysfs, by_id, dev


def fake_query(device: Path) -> list[CameraFormat]:
    if device.name == "video0":
        return [MJPEG, YUYV]
    raise PermissionError(errno.EACCES, "Permission denied", str(device))


def test_lists_capture_nodes_with_stable_names_bus_and_formats(tmp_path: Path) -> None:
    sysfs, by_id, dev = build_fake_v4l2(tmp_path)
    cameras = list_cameras(sysfs, by_id, dev, query_formats=fake_query)

    assert [c.device for c in cameras] == [str(dev / "video0"), str(dev / "video10")]
    webcam, grabber = cameras
    assert webcam.name == "HD Webcam C270" and webcam.backend == "v4l2"
    assert webcam.by_id == (str(by_id / "usb-046d_C270_2A4F-video-index0"),)
    assert webcam.stable_spec == webcam.by_id[0]
    assert (webcam.bus, webcam.subsystem, webcam.usb_id) == ("1-2:1.0", "usb", "046d:0825")
    assert webcam.formats == (MJPEG, YUYV) and webcam.error is None
    assert grabber.index == 10 and grabber.usb_id == "534d:2109"
    assert grabber.formats == () and grabber.error is not None
    assert "Permission denied" in grabber.error


def test_missing_sysfs_means_no_cameras(tmp_path: Path) -> None:
    assert list_cameras(tmp_path / "nope", tmp_path / "nope", tmp_path) == []


# -- the ioctl code against a fake driver ------------------------------------------------


def test_v4l2_structs_and_request_numbers_match_the_kernel() -> None:
    # Sizes and numbers from linux/videodev2.h (as v4l2-ctl sees them on x86-64).
    assert ctypes.sizeof(v4l2._FmtDesc) == 64
    assert ctypes.sizeof(v4l2._FrmSizeEnum) == 44
    assert ctypes.sizeof(v4l2._FrmIvalEnum) == 52
    assert ctypes.sizeof(v4l2._Capability) == 104
    assert v4l2.VIDIOC_QUERYCAP == 0x80685600
    assert v4l2.VIDIOC_ENUM_FMT == 0xC0405602
    assert v4l2.VIDIOC_ENUM_FRAMESIZES == 0xC02C564A
    assert v4l2.VIDIOC_ENUM_FRAMEINTERVALS == 0xC034564B


def _fourcc(text: str) -> int:
    return int.from_bytes(text.encode("ascii"), "little")


class FakeDriver:
    """Answers the enumeration ioctls like a UVC camera with MJPEG and YUYV."""

    formats: list[tuple[str, int, bytes]] = [
        ("MJPG", v4l2.V4L2_FMT_FLAG_COMPRESSED, b"Motion-JPEG"),
        ("YUYV", 0, b"YUYV 4:2:2"),
    ]
    mjpeg_sizes = [(640, 480), (1280, 720)]

    def ioctl(self, fd: int, request: int, arg: Any) -> int:
        if request == v4l2.VIDIOC_ENUM_FMT:
            if arg.type != v4l2.V4L2_BUF_TYPE_VIDEO_CAPTURE or arg.index >= len(self.formats):
                raise OSError(errno.EINVAL, "Invalid argument")
            code, flags, description = self.formats[arg.index]
            arg.pixelformat, arg.flags, arg.description = _fourcc(code), flags, description
        elif request == v4l2.VIDIOC_ENUM_FRAMESIZES:
            if arg.pixel_format == _fourcc("MJPG") and arg.index < len(self.mjpeg_sizes):
                arg.type = v4l2.V4L2_FRMSIZE_TYPE_DISCRETE
                arg.u.discrete.width, arg.u.discrete.height = self.mjpeg_sizes[arg.index]
            elif arg.pixel_format == _fourcc("YUYV") and arg.index == 0:
                arg.type = 3  # V4L2_FRMSIZE_TYPE_STEPWISE
                s = arg.u.stepwise
                s.min_width, s.max_width, s.step_width = 160, 1280, 16
                s.min_height, s.max_height, s.step_height = 120, 720, 8
            else:
                raise OSError(errno.EINVAL, "Invalid argument")
        elif request == v4l2.VIDIOC_ENUM_FRAMEINTERVALS:
            rates = [(1, 30), (1, 15)] if (arg.width, arg.height) == (640, 480) else [(1, 10)]
            if arg.index >= len(rates):
                raise OSError(errno.EINVAL, "Invalid argument")
            arg.type = v4l2.V4L2_FRMIVAL_TYPE_DISCRETE
            arg.u.discrete.numerator, arg.u.discrete.denominator = rates[arg.index]
        else:
            raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")
        return 0


def test_query_v4l2_formats_walks_formats_sizes_and_intervals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = FakeDriver()
    monkeypatch.setattr(fcntl, "ioctl", driver.ioctl)
    monkeypatch.setattr("devices.v4l2.os.open", lambda path, flags: 99)
    monkeypatch.setattr("devices.v4l2.os.close", lambda fd: None)

    formats = v4l2.query_v4l2_formats(Path("/dev/video0"))

    mjpeg, yuyv = formats
    assert (mjpeg.fourcc, mjpeg.description, mjpeg.compressed) == ("MJPG", "Motion-JPEG", True)
    assert mjpeg.input_format == "mjpeg"
    assert mjpeg.sizes == (FrameSize(640, 480, (30.0, 15.0)), FrameSize(1280, 720, (10.0,)))
    assert yuyv.input_format == "yuyv422" and yuyv.sizes == ()
    assert yuyv.size_range == SizeRange(160, 1280, 16, 120, 720, 8)


def test_query_v4l2_formats_on_a_missing_node_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        v4l2.query_v4l2_formats(tmp_path / "video0")


# -- mode checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "fps", "input_format"),
    [
        (None, None, None),
        ((640, 480), 15.0, None),
        ((1280, 720), 30.0, "mjpeg"),
        ((640, 480), 29.97, None),  # within 1 % of 30
        ((640, 480), 12.0, "yuyv422"),  # inside the interval range
        (None, None, "YUYV"),  # fourcc works too
    ],
)
def test_check_mode_accepts_offered_modes(
    size: tuple[int, int] | None, fps: float | None, input_format: str | None
) -> None:
    check_mode("/dev/video0", [MJPEG, YUYV], size=size, fps=fps, input_format=input_format)


@pytest.mark.parametrize(
    ("size", "fps", "input_format", "requested", "listed"),
    [
        ((1920, 1080), None, None, "size 1920x1080", "mjpeg: 640x480@30,15, 1280x720@30"),
        ((1280, 720), 60.0, None, "rate 60 fps at 1280x720", "1280x720@30"),
        (None, None, "h264", "input_format 'h264'", "30; yuyv422: 640x480@5-30"),
        ((1280, 720), None, "yuyv422", "size 1280x720 (yuyv422)", "yuyv422: 640x480@5-30"),
    ],
)
def test_check_mode_refuses_and_lists_what_is_offered(
    size: tuple[int, int] | None,
    fps: float | None,
    input_format: str | None,
    requested: str,
    listed: str,
) -> None:
    with pytest.raises(UnsupportedMode) as caught:
        check_mode("/dev/video0", [MJPEG, YUYV], size=size, fps=fps, input_format=input_format)
    message = str(caught.value)
    assert requested in message and listed in message, message


def test_check_mode_without_formats_accepts_anything() -> None:
    check_mode("/dev/video0", [], size=(1, 1), fps=1000.0, input_format="h264")


def test_size_range_uses_its_grid() -> None:
    fmt = CameraFormat("YUYV", size_range=SizeRange(160, 1280, 16, 120, 720, 8))
    assert fmt.offers_size(640, 480)
    assert not fmt.offers_size(641, 480)
    assert not fmt.offers_size(1920, 1080)


# -- macOS / Windows listing (parsing only: no such devices here) ---------------------------


def test_parse_avfoundation_device_list() -> None:
    lines = [
        "AVFoundation video devices:\n",
        "[0] FaceTime HD Camera\n",
        "[1] Capture screen 0\n",
        "AVFoundation audio devices:\n",
        "[0] MacBook Pro Microphone\n",
    ]
    assert parse_ffmpeg_device_list("avfoundation", lines) == [
        (0, "FaceTime HD Camera"),
        (1, "Capture screen 0"),
    ]


def test_parse_dshow_device_list() -> None:
    lines = [
        '"Integrated Camera" (video)\n',
        '  Alternative name "@device_pnp_\\\\?\\usb#vid_04f2"\n',
        '"Microphone Array (Realtek)" (audio)\n',
        '"OBS Virtual Camera" (video)\n',
    ]
    assert parse_ffmpeg_device_list("dshow", lines) == [
        (0, "Integrated Camera"),
        (1, "OBS Virtual Camera"),
    ]


# -- describe_devices ----------------------------------------------------------------------


def test_describe_devices_is_json_and_reports_missing_portaudio(tmp_path: Path) -> None:
    sysfs, by_id, dev = build_fake_v4l2(tmp_path)

    def cameras() -> list[Any]:
        return list_cameras(sysfs, by_id, dev, query_formats=fake_query)

    def no_portaudio() -> list[Any]:
        raise PortAudioMissing("libportaudio.so.2: cannot open shared object file")

    described = describe_devices(cameras=cameras, microphones=no_portaudio)
    json.dumps(described)
    assert [c["name"] for c in described["cameras"]] == ["HD Webcam C270", "USB Video"]
    first_format = described["cameras"][0]["formats"][0]
    assert first_format["input_format"] == "mjpeg"
    assert first_format["sizes"][0] == {
        "width": 640,
        "height": 480,
        "fps": [30.0, 15.0],
        "fps_range": None,
    }
    assert described["microphones"] == []
    (error,) = described["errors"]
    assert error["source"] == "microphones" and error["type"] == "PortAudioMissing"
    assert "install libportaudio2" in error["message"]


class _BlockSounddevice:
    """A meta-path finder that fails like ``import sounddevice`` without PortAudio."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return None


def test_missing_portaudio_is_an_error_entry_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BlockSounddevice(), *sys.meta_path])
    from devices.microphones import list_microphones

    with pytest.raises(PortAudioMissing, match="install libportaudio2"):
        list_microphones()
    described = describe_devices(cameras=list)
    assert [e["type"] for e in described["errors"]] == ["PortAudioMissing"]
