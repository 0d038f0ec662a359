"""The frames ``bench.capture`` encodes: 720p30 ``testsrc2`` with temporal noise,
stored once as raw full-range I420 (and as MJPEG and raw Matroska files for the
connector), and what judges a JPEG's quality (luma PSNR against them).
"""

from __future__ import annotations

import io
import resource
import statistics
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

WIDTH, HEIGHT, FPS = 1280, 720, 30
QUALITY = 85
SEGMENT_S = 2.0
SOURCE = f"testsrc2=size={WIDTH}x{HEIGHT}:rate={FPS},noise=alls=8:allf=t+u,format=yuvj420p"
RESULT_MARK = "@@capture-result "
PSNR_FRAMES = 8


# -- the frames ------------------------------------------------------------------------------


def make_sources(workdir: Path, frames: int) -> None:
    """``raw.yuv`` (I420, full range), ``raw.mkv`` (the same, rawvideo in Matroska) and
    ``mjpeg.mkv`` (the same frames as an MJPEG camera would send them)."""
    lavfi = av.open(SOURCE, format="lavfi")
    with (
        open(workdir / "raw.yuv", "wb") as raw,
        av.open(str(workdir / "raw.mkv"), "w") as mkv,
        av.open(str(workdir / "mjpeg.mkv"), "w") as mjpeg,
    ):
        raw_stream = mkv.add_stream("rawvideo", rate=FPS)
        jpeg_stream = mjpeg.add_stream("mjpeg", rate=FPS)
        for stream in (raw_stream, jpeg_stream):
            stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuvj420p"
        jpeg_stream.options = {"qmin": "4", "qmax": "4"}
        for index, frame in enumerate(lavfi.decode(video=0)):
            if index == frames:
                break
            raw.write(b"".join(bytes(p) for p in frame.planes))  # no padding at 1280
            frame.pts, frame.time_base = index, Fraction(1, FPS)
            frame.pict_type = av.video.frame.PictureType.NONE
            mkv.mux(raw_stream.encode(frame))
            mjpeg.mux(jpeg_stream.encode(frame))
        mkv.mux(raw_stream.encode(None))
        mjpeg.mux(jpeg_stream.encode(None))
    lavfi.close()


def read_raw(workdir: Path, index: int) -> np.ndarray:
    """Luma plane of raw frame ``index``."""
    size = WIDTH * HEIGHT * 3 // 2
    with open(workdir / "raw.yuv", "rb") as fh:
        fh.seek(index * size)
        data = np.frombuffer(fh.read(size), dtype=np.uint8)
    return data[: WIDTH * HEIGHT].reshape(HEIGHT, WIDTH)


def jpeg_quality(workdir: Path, jpegs: Sequence[bytes]) -> dict[str, float]:
    """Mean bytes per frame and mean luma PSNR of the first JPEGs against the raw."""
    psnrs = []
    for index, data in enumerate(jpegs[:PSNR_FRAMES]):
        with av.open(io.BytesIO(data), "r") as container:
            frame = next(container.decode(video=0))
        plane = frame.planes[0]
        luma = np.frombuffer(memoryview(plane), np.uint8).reshape(plane.height, plane.line_size)
        error = luma[:, :WIDTH].astype(np.float64) - read_raw(workdir, index)
        psnrs.append(10 * np.log10(255**2 / max(np.mean(error**2), 1e-9)))
    return {"bytes": statistics.mean(len(j) for j in jpegs), "psnr": statistics.mean(psnrs)}


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


# -- mediaflow, each measured in a child process ---------------------------------------------


def decoded_frames(workdir: Path, pix_fmt: str = "yuvj420p") -> Any:
    """The raw frames as PyAV frames, as a capture device hands them over."""
    container = av.open(
        str(workdir / "raw.yuv"),
        format="rawvideo",
        options={"pixel_format": pix_fmt, "video_size": f"{WIDTH}x{HEIGHT}", "framerate": "30"},
    )
    yield from container.decode(video=0)
    container.close()
