"""JPEG encoding of decoded frames, straight from their YUV planes.

libjpeg-turbo through ``simplejpeg`` encodes the Y, U and V planes as they are (no RGB
round trip, no copy: the planes are numpy views of the frame's buffers) and releases
the GIL while it works, so an encoding thread runs beside the event loop. When
``simplejpeg`` is not installed, FFmpeg's ``mjpeg`` encoder does the same job for about
twice the CPU (see ``bench/capture.py``).

JPEG (JFIF) samples are full range. A frame that is already full-range 4:2:0 at the
wanted size (an MJPEG camera's decoded frame, ``yuvj420p``) is encoded as it is; any
other frame goes through one swscale pass (the encoder's own
:class:`~connectors._frames.FrameConverter`) that converts format, range and size at
once (``yuv420p`` video is limited range: encoding its planes unconverted would show
grey blacks and dim whites).

Everything here blocks for milliseconds: call it from a worker thread.
"""

from __future__ import annotations

import importlib
from fractions import Fraction
from typing import Any, Protocol

import av
import numpy as np
import numpy.typing as npt

from connectors._frames import FrameConverter

JPEG_PIX_FMT = "yuvj420p"
_FULL_RANGE = 2  # AVCOL_RANGE_JPEG


class JpegEncoder(Protocol):
    """Turns a decoded frame into JPEG bytes (resized to ``size`` when one is set)."""

    name: str

    def encode(self, frame: av.VideoFrame) -> bytes: ...


def jpeg_ready(
    frame: av.VideoFrame, size: tuple[int, int] | None, converter: FrameConverter
) -> av.VideoFrame:
    """``frame`` as full-range 4:2:0 at ``size`` (or its own size): itself when it
    already is, else one swscale conversion. Blocks (a few ms at 720p)."""
    width, height = size if size is not None else (frame.width, frame.height)
    same_size = (frame.width, frame.height) == (width, height)
    fmt = frame.format.name
    if same_size and (
        fmt == JPEG_PIX_FMT or (fmt == "yuv420p" and frame.color_range == _FULL_RANGE)
    ):
        return frame
    return converter.convert(frame, width, height, JPEG_PIX_FMT)


def plane_views(frame: av.VideoFrame) -> list[npt.NDArray[np.uint8]]:
    """Numpy views (no copy) of a planar frame's planes, padding cut off."""
    views = []
    for plane in frame.planes:
        rows = np.frombuffer(
            memoryview(plane), dtype=np.uint8, count=plane.line_size * plane.height
        )
        views.append(rows.reshape(plane.height, plane.line_size)[:, : plane.width])
    return views


class TurboJpegEncoder:
    """libjpeg-turbo via ``simplejpeg.encode_jpeg_yuv_planes``."""

    name = "libjpeg-turbo"

    def __init__(self, quality: int, size: tuple[int, int] | None = None) -> None:
        """Raises ``ImportError`` when ``simplejpeg`` is not installed."""
        # Imported by name: simplejpeg ships no type information, and a machine without
        # it falls back to FFmpeg's encoder instead of failing to import connectors.
        self._simplejpeg: Any = importlib.import_module("simplejpeg")
        self.quality = quality
        self.size = size
        self._converter = FrameConverter()

    def encode(self, frame: av.VideoFrame) -> bytes:
        y, u, v = plane_views(jpeg_ready(frame, self.size, self._converter))
        # fastdct: the integer DCT GStreamer's jpegenc also uses by default.
        data = self._simplejpeg.encode_jpeg_yuv_planes(y, u, v, quality=self.quality, fastdct=True)
        return bytes(data)


class FfmpegJpegEncoder:
    """FFmpeg's ``mjpeg`` encoder at a fixed quantiser matched to ``quality``."""

    name = "ffmpeg-mjpeg"

    def __init__(self, quality: int, size: tuple[int, int] | None = None) -> None:
        self.quality = quality
        self.size = size
        self._codec: av.VideoCodecContext | None = None
        self._count = 0
        self._converter = FrameConverter()

    def encode(self, frame: av.VideoFrame) -> bytes:
        ready = jpeg_ready(frame, self.size, self._converter)
        if ready is frame:
            # The capture loop shares the frame with the segment encoder, which stamps
            # its pts; this encoder refuses pts that do not increase, so it encodes a
            # private copy stamped with its own count.
            ready = av.VideoFrame.from_ndarray(frame.to_ndarray(), format=JPEG_PIX_FMT)
        codec = self._codec_for(ready.width, ready.height)
        self._count += 1
        ready.pts, ready.time_base = self._count, codec.time_base
        packets = codec.encode(ready)
        return b"".join(bytes(p) for p in packets)

    def _codec_for(self, width: int, height: int) -> av.VideoCodecContext:
        codec = self._codec
        if codec is None or (codec.width, codec.height) != (width, height):
            codec = av.CodecContext.create("mjpeg", "w")
            assert isinstance(codec, av.VideoCodecContext)
            codec.width, codec.height, codec.pix_fmt = width, height, JPEG_PIX_FMT
            codec.time_base = Fraction(1, 30)  # required by the API; JPEG has no timing
            q = str(mjpeg_qscale(self.quality))
            codec.options = {"qmin": q, "qmax": q}
            codec.open()
            self._codec = codec
        return codec


def mjpeg_qscale(quality: int) -> int:
    """FFmpeg's mjpeg quantiser closest to libjpeg ``quality`` (85 -> 4), measured by
    size and PSNR on a 720p test pattern (bench/capture.py prints both)."""
    return max(1, min(31, round(1 + (100 - quality) / 5)))


def make_jpeg_encoder(quality: int, size: tuple[int, int] | None = None) -> JpegEncoder:
    """libjpeg-turbo when ``simplejpeg`` is installed, else FFmpeg's mjpeg encoder."""
    try:
        return TurboJpegEncoder(quality, size)
    except ImportError:
        return FfmpegJpegEncoder(quality, size)
