"""What a camera offers (pixel formats, frame sizes, frame rates) and checking a request.

Pure data and pure functions: the V4L2 probe (:mod:`devices.v4l2`) fills these records,
:func:`check_mode` refuses a size, rate or format the device does not list, with a
message that lists what it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from devices.errors import UnsupportedMode

# V4L2 fourcc -> the name FFmpeg's v4l2 demuxer takes as ``input_format``.
FOURCC_TO_FFMPEG: dict[str, str] = {
    "MJPG": "mjpeg",
    "JPEG": "mjpeg",
    "H264": "h264",
    "HEVC": "hevc",
    "YUYV": "yuyv422",
    "UYVY": "uyvy422",
    "YVYU": "yvyu422",
    "NV12": "nv12",
    "NV21": "nv21",
    "YU12": "yuv420p",
    "YV12": "yuv420p",
    "RGB3": "rgb24",
    "BGR3": "bgr24",
    "GREY": "gray",
    "Y16 ": "gray16le",
}


@dataclass(frozen=True)
class FrameSize:
    """One discrete frame size and the rates offered at it.

    ``fps`` lists discrete rates; ``fps_range`` is ``(min, max)`` when the driver reports
    a continuous or stepwise interval range instead.
    """

    width: int
    height: int
    fps: tuple[float, ...] = ()
    fps_range: tuple[float, float] | None = None

    def offers_rate(self, rate: float) -> bool:
        """True when ``rate`` is listed (to 1 %) or within the reported range."""
        if any(abs(offered - rate) <= 0.01 * max(offered, rate) for offered in self.fps):
            return True
        if self.fps_range is not None:
            low, high = self.fps_range
            return low * 0.99 <= rate <= high * 1.01
        return False

    def describe(self) -> str:
        """``"640x480@30,15"`` or ``"640x480@1-30"``; rates left out when unknown."""
        rates = ",".join(f"{r:g}" for r in self.fps)
        if self.fps_range is not None:
            span = f"{self.fps_range[0]:g}-{self.fps_range[1]:g}"
            rates = f"{rates},{span}" if rates else span
        return f"{self.width}x{self.height}@{rates}" if rates else f"{self.width}x{self.height}"


@dataclass(frozen=True)
class SizeRange:
    """A continuous or stepwise frame-size range (rates per size are not enumerated)."""

    min_width: int
    max_width: int
    step_width: int
    min_height: int
    max_height: int
    step_height: int

    def contains(self, width: int, height: int) -> bool:
        """True when ``width`` x ``height`` lies on the range's grid."""

        def fits(value: int, low: int, high: int, step: int) -> bool:
            return low <= value <= high and (value - low) % max(step, 1) == 0

        return fits(width, self.min_width, self.max_width, self.step_width) and fits(
            height, self.min_height, self.max_height, self.step_height
        )

    def describe(self) -> str:
        """``"160x120-1920x1080"``."""
        return f"{self.min_width}x{self.min_height}-{self.max_width}x{self.max_height}"


@dataclass(frozen=True)
class CameraFormat:
    """One pixel format a capture node offers (V4L2 ``VIDIOC_ENUM_FMT`` entry)."""

    fourcc: str
    description: str = ""
    compressed: bool = False
    sizes: tuple[FrameSize, ...] = ()
    size_range: SizeRange | None = None

    @property
    def input_format(self) -> str | None:
        """The FFmpeg ``input_format`` name for this format, when one is known."""
        return FOURCC_TO_FFMPEG.get(self.fourcc)

    @property
    def label(self) -> str:
        """``input_format`` when known, else the fourcc (what a user would type)."""
        return self.input_format or self.fourcc.strip()

    def matches(self, name: str) -> bool:
        """True when ``name`` is this format's FFmpeg name or fourcc (case-insensitive)."""
        wanted = name.strip().lower()
        return wanted in {self.fourcc.strip().lower(), (self.input_format or "").lower()}

    def offers_size(self, width: int, height: int) -> bool:
        """True when the size is listed or inside the size range."""
        if any(s.width == width and s.height == height for s in self.sizes):
            return True
        return self.size_range is not None and self.size_range.contains(width, height)

    def describe(self) -> str:
        """``"mjpeg: 640x480@30, 1280x720@30,15"``."""
        parts = [s.describe() for s in self.sizes]
        if self.size_range is not None:
            parts.append(self.size_range.describe())
        return f"{self.label}: {', '.join(parts) if parts else 'no sizes reported'}"


def check_mode(
    spec: str,
    formats: Sequence[CameraFormat],
    *,
    size: tuple[int, int] | None = None,
    fps: float | None = None,
    input_format: str | None = None,
) -> None:
    """Raise :class:`UnsupportedMode` unless some listed format offers the request.

    Pure; never blocks. An empty ``formats`` (the probe could not tell) accepts anything:
    FFmpeg gets the last word when it opens the device.
    """
    if not formats:
        return
    candidates = list(formats)
    if input_format is not None:
        candidates = [f for f in candidates if f.matches(input_format)]
        if not candidates:
            raise UnsupportedMode(
                spec, f"input_format {input_format!r}", [f.describe() for f in formats]
            )
    where = f" ({input_format})" if input_format else ""
    if size is not None:
        width, height = size
        candidates = [f for f in candidates if f.offers_size(width, height)]
        if not candidates:
            offered = [
                f.describe() for f in formats if input_format is None or f.matches(input_format)
            ]
            raise UnsupportedMode(spec, f"size {width}x{height}{where}", offered)
    if fps is not None and not _offers_rate(candidates, size, fps):
        offered = [f.describe() for f in candidates]
        shown = f" at {size[0]}x{size[1]}" if size is not None else ""
        raise UnsupportedMode(spec, f"rate {fps:g} fps{shown}{where}", offered)


def _offers_rate(
    formats: Sequence[CameraFormat], size: tuple[int, int] | None, rate: float
) -> bool:
    known_any = False
    for fmt in formats:
        if fmt.size_range is not None and (size is None or fmt.size_range.contains(*size)):
            return True  # rates of a size range are not enumerated: let FFmpeg decide
        for frame_size in fmt.sizes:
            if size is not None and (frame_size.width, frame_size.height) != size:
                continue
            if frame_size.fps or frame_size.fps_range:
                known_any = True
            if frame_size.offers_rate(rate):
                return True
    return not known_any  # no rate information at all: cannot refuse
