"""Ask a V4L2 capture node what it offers, with the kernel's own enumeration ioctls.

``VIDIOC_ENUM_FMT`` lists pixel formats, ``VIDIOC_ENUM_FRAMESIZES`` the sizes of each,
``VIDIOC_ENUM_FRAMEINTERVALS`` the rates of each size. This is what ``v4l2-ctl
--list-formats-ext`` does; it is more reliable than parsing FFmpeg's log output and
needs no stream to be started. Linux only; the ioctl numbers use the generic ``_IOC``
layout (x86, ARM, RISC-V), not the one of PowerPC, MIPS or SPARC. Only single-planar
capture (``V4L2_BUF_TYPE_VIDEO_CAPTURE``) is enumerated.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

from devices.camera_modes import CameraFormat, FrameSize, SizeRange

_IOC_WRITE = 1
_IOC_READ = 2

V4L2_BUF_TYPE_VIDEO_CAPTURE = 1
V4L2_FMT_FLAG_COMPRESSED = 0x0001
V4L2_FRMSIZE_TYPE_DISCRETE = 1
V4L2_FRMIVAL_TYPE_DISCRETE = 1
V4L2_CAP_VIDEO_CAPTURE = 0x00000001
V4L2_CAP_DEVICE_CAPS = 0x80000000


def _ioc(direction: int, number: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (ord("V") << 8) | number


class _FmtDesc(ctypes.Structure):
    _fields_ = (
        ("index", ctypes.c_uint32),
        ("type", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("description", ctypes.c_char * 32),
        ("pixelformat", ctypes.c_uint32),
        ("mbus_code", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32 * 3),
    )


class _Discrete(ctypes.Structure):
    _fields_ = (("width", ctypes.c_uint32), ("height", ctypes.c_uint32))


class _Stepwise(ctypes.Structure):
    _fields_ = (
        ("min_width", ctypes.c_uint32),
        ("max_width", ctypes.c_uint32),
        ("step_width", ctypes.c_uint32),
        ("min_height", ctypes.c_uint32),
        ("max_height", ctypes.c_uint32),
        ("step_height", ctypes.c_uint32),
    )


class _SizeUnion(ctypes.Union):
    _fields_ = (("discrete", _Discrete), ("stepwise", _Stepwise))


class _FrmSizeEnum(ctypes.Structure):
    _fields_ = (
        ("index", ctypes.c_uint32),
        ("pixel_format", ctypes.c_uint32),
        ("type", ctypes.c_uint32),
        ("u", _SizeUnion),
        ("reserved", ctypes.c_uint32 * 2),
    )


class _Fract(ctypes.Structure):
    _fields_ = (("numerator", ctypes.c_uint32), ("denominator", ctypes.c_uint32))


class _IvalStepwise(ctypes.Structure):
    _fields_ = (("min", _Fract), ("max", _Fract), ("step", _Fract))


class _IvalUnion(ctypes.Union):
    _fields_ = (("discrete", _Fract), ("stepwise", _IvalStepwise))


class _FrmIvalEnum(ctypes.Structure):
    _fields_ = (
        ("index", ctypes.c_uint32),
        ("pixel_format", ctypes.c_uint32),
        ("width", ctypes.c_uint32),
        ("height", ctypes.c_uint32),
        ("type", ctypes.c_uint32),
        ("u", _IvalUnion),
        ("reserved", ctypes.c_uint32 * 2),
    )


class _Capability(ctypes.Structure):
    _fields_ = (
        ("driver", ctypes.c_char * 16),
        ("card", ctypes.c_char * 32),
        ("bus_info", ctypes.c_char * 32),
        ("version", ctypes.c_uint32),
        ("capabilities", ctypes.c_uint32),
        ("device_caps", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32 * 3),
    )


VIDIOC_QUERYCAP = _ioc(_IOC_READ, 0, ctypes.sizeof(_Capability))
VIDIOC_ENUM_FMT = _ioc(_IOC_READ | _IOC_WRITE, 2, ctypes.sizeof(_FmtDesc))
VIDIOC_ENUM_FRAMESIZES = _ioc(_IOC_READ | _IOC_WRITE, 74, ctypes.sizeof(_FrmSizeEnum))
VIDIOC_ENUM_FRAMEINTERVALS = _ioc(_IOC_READ | _IOC_WRITE, 75, ctypes.sizeof(_FrmIvalEnum))


def fourcc_to_str(code: int) -> str:
    """``0x47504A4D`` -> ``"MJPG"`` (little-endian four characters)."""
    return bytes((code >> shift) & 0xFF for shift in (0, 8, 16, 24)).decode("ascii", "replace")


def _ioctl(fd: int, request: int, arg: ctypes.Structure) -> bool:
    """One ioctl; False when the driver says EINVAL (the end of an enumeration)."""
    import fcntl  # Linux only; imported here so the module imports everywhere

    try:
        fcntl.ioctl(fd, request, arg)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return False
        raise
    return True


def is_capture_node(device: Path) -> bool:
    """True when ``VIDIOC_QUERYCAP`` reports video capture. Blocks briefly; raises OSError."""
    fd = os.open(device, os.O_RDWR | os.O_NONBLOCK)
    try:
        cap = _Capability()
        if not _ioctl(fd, VIDIOC_QUERYCAP, cap):
            return False
        caps = cap.device_caps if cap.capabilities & V4L2_CAP_DEVICE_CAPS else cap.capabilities
        return bool(caps & V4L2_CAP_VIDEO_CAPTURE)
    finally:
        os.close(fd)


def query_v4l2_formats(device: Path) -> list[CameraFormat]:
    """Enumerate formats, sizes and rates of ``device`` (e.g. ``/dev/video0``).

    Blocks briefly (a few ioctls; the device is not streamed). Raises ``OSError`` when
    the node cannot be opened (missing, busy on some drivers, no permission).
    """
    fd = os.open(device, os.O_RDWR | os.O_NONBLOCK)
    try:
        formats: list[CameraFormat] = []
        desc = _FmtDesc(index=0, type=V4L2_BUF_TYPE_VIDEO_CAPTURE)
        while _ioctl(fd, VIDIOC_ENUM_FMT, desc):
            sizes, size_range = _frame_sizes(fd, desc.pixelformat)
            formats.append(
                CameraFormat(
                    fourcc=fourcc_to_str(desc.pixelformat),
                    description=desc.description.decode("utf-8", "replace"),
                    compressed=bool(desc.flags & V4L2_FMT_FLAG_COMPRESSED),
                    sizes=sizes,
                    size_range=size_range,
                )
            )
            desc = _FmtDesc(index=desc.index + 1, type=V4L2_BUF_TYPE_VIDEO_CAPTURE)
        return formats
    finally:
        os.close(fd)


def _frame_sizes(fd: int, pixel_format: int) -> tuple[tuple[FrameSize, ...], SizeRange | None]:
    sizes: list[FrameSize] = []
    query = _FrmSizeEnum(index=0, pixel_format=pixel_format)
    while _ioctl(fd, VIDIOC_ENUM_FRAMESIZES, query):
        if query.type != V4L2_FRMSIZE_TYPE_DISCRETE:
            # Continuous / stepwise: one entry describes the whole range.
            s = query.u.stepwise
            size_range = SizeRange(
                s.min_width, s.max_width, s.step_width, s.min_height, s.max_height, s.step_height
            )
            return tuple(sizes), size_range
        width, height = query.u.discrete.width, query.u.discrete.height
        rates, rate_range = _frame_rates(fd, pixel_format, width, height)
        sizes.append(FrameSize(width, height, rates, rate_range))
        query = _FrmSizeEnum(index=query.index + 1, pixel_format=pixel_format)
    return tuple(sizes), None


def _frame_rates(
    fd: int, pixel_format: int, width: int, height: int
) -> tuple[tuple[float, ...], tuple[float, float] | None]:
    rates: list[float] = []
    query = _FrmIvalEnum(index=0, pixel_format=pixel_format, width=width, height=height)
    while _ioctl(fd, VIDIOC_ENUM_FRAMEINTERVALS, query):
        if query.type != V4L2_FRMIVAL_TYPE_DISCRETE:
            # An interval range: the shortest interval is the highest rate.
            step = query.u.stepwise
            return tuple(rates), (_rate(step.max), _rate(step.min))
        rates.append(_rate(query.u.discrete))
        query = _FrmIvalEnum(
            index=query.index + 1, pixel_format=pixel_format, width=width, height=height
        )
    return tuple(rates), None


def _rate(interval: _Fract) -> float:
    """Frame interval (seconds, as a fraction) -> frames per second."""
    if interval.numerator == 0:
        return 0.0
    return round(float(interval.denominator) / float(interval.numerator), 3)
