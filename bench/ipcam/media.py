"""The IP cameras' picture and the server that plays it: one 1080p30 file, N RTSP mounts.

:func:`camera_file` makes (once, then caches in :data:`CACHE_DIR`) the file every
camera plays: ``testsrc2`` 1920x1080 at 30 frames/s through libx264 (High profile,
veryfast, an IDR every second, as cameras ship with "I-frame interval = frame rate",
no B-frames) and 48 kHz AAC, made by the RTSP fixture's own :func:`rtsp_media`
(``tests/rtsp_media.py``), which keeps its files in a temp dir deleted at exit: the
bench copies the result out. Encoding two minutes of 1080p takes about a minute here.

:func:`camera_files` gives each camera a picture of its own without encoding again:
camera ``k`` plays the file *rotated* by ``k`` groups of pictures (remuxed: it starts
``k`` seconds in and ends with the first ``k`` seconds, timestamps made continuous).
Identical cameras would make identical JPEGs at the same instants, and mediaflow's
content-addressed store writes (and fsyncs) a repeated artifact only once, which the
peer's files never enjoy.

:func:`serve` starts one GStreamer RTSP server process with a mount
``/cam0 .. /camN-1`` per file, each its own pipeline (a mount plays its file once,
from the start, when its first client connects: every client of a run is its first).

:func:`reference_slices` is a file's video as the loss check compares it: every coded
slice (``tests/copy_helpers.h264_slices``), in decode order, read from the base file
once and rotated like the file.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from tests.copy_helpers import h264_slices
from tests.rtsp_media import rtsp_media
from tests.rtsp_server import Mount, RtspServer, launch

CACHE_DIR = Path.home() / ".cache" / "mediaflow-bench"


@dataclass(frozen=True)
class CameraMedia:
    """What every camera sends; ``seconds`` must cover a whole phase (a mount plays once)."""

    size: tuple[int, int] = (1920, 1080)
    rate: int = 30
    gop_s: float = 1.0
    seconds: float = 120.0

    @property
    def label(self) -> str:
        width, height = self.size
        return f"{width}x{height} at {self.rate} frames/s, H.264 High, IDR every {self.gop_s:g} s"

    @property
    def name(self) -> str:
        width, height = self.size
        return f"h264-{width}x{height}-{self.rate}fps-{self.seconds:g}s-gop{self.gop_s:g}.mp4"


def camera_file(media: CameraMedia, cache: Path = CACHE_DIR) -> Path:
    """The cached file for ``media``, made on first use (blocks about a minute per two
    minutes of 1080p). Raises ``av.error.FFmpegError`` if encoding fails, ``OSError``
    if the cache cannot be written."""
    path = cache / media.name
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    made = rtsp_media(
        "h264", size=media.size, fps=media.rate, seconds=media.seconds, gop_s=media.gop_s
    )
    partial = path.with_suffix(".part")
    shutil.copyfile(made, partial)
    partial.replace(path)
    return path


def rotated_name(base: Path, groups: int) -> Path:
    return base if groups == 0 else base.with_name(f"{base.stem}-rot{groups}{base.suffix}")


def rotate(base: Path, groups: int, out: Path, gop_s: float) -> None:
    """Write ``base`` rotated by ``groups`` groups of pictures of ``gop_s`` to ``out``
    (module doc): packets copied, video and sound in one time order. The sound's
    priming packet (before 0) is left out. Raises ``av.error.FFmpegError``."""
    with av.open(str(base)) as source:
        video, sound = source.streams.video[0], source.streams.audio[0]
        packets = [p for p in source.demux(video, sound) if p.size and p.pts is not None]
        ends = {
            s.index: max((p.pts or 0) + (p.duration or 0) for p in packets if p.stream is s)
            for s in (video, sound)
        }
        partial = out.with_suffix(".part")
        with av.open(str(partial), "w", format="mp4", options={"movflags": "+faststart"}) as dst:
            targets = {
                video.index: dst.add_stream_from_template(video),
                sound.index: dst.add_stream_from_template(sound),
            }
            timed = []
            for packet in packets:
                base_tb = packet.time_base or Fraction(1)
                cut = round(Fraction(groups) * Fraction(gop_s) / base_tb)
                pts = packet.pts or 0
                if pts < 0:
                    continue
                shift = -cut if pts >= cut else ends[packet.stream.index] - cut
                packet.pts = pts + shift
                packet.dts = (packet.dts if packet.dts is not None else pts) + shift
                timed.append((packet.dts * base_tb, packet.stream.index, packet))
            for _, index, packet in sorted(timed, key=lambda item: (item[0], item[1])):
                packet.stream = targets[index]
                dst.mux(packet)
    partial.replace(out)


def camera_files(media: CameraMedia, cameras: int, cache: Path = CACHE_DIR) -> list[Path]:
    """One file per camera (module doc): the cached base file and its rotations by
    1 .. ``cameras - 1`` groups of pictures, made on first use (a few seconds each)."""
    base = camera_file(media, cache)
    files = []
    for k in range(cameras):
        groups = k % round(media.seconds / media.gop_s)
        path = rotated_name(base, groups)
        if not path.exists():
            rotate(base, groups, path, media.gop_s)
        files.append(path)
    return files


def mount_path(index: int) -> str:
    return f"/cam{index}"


def serve(files: list[Path]) -> RtspServer:
    """A started server with a mount per file (camera ``k`` at :func:`mount_path`,
    H.264 + AAC). The caller stops it. Raises ``tests.rtsp_server.RtspUnavailableError``
    without GstRtspServer, ``RtspStartError`` if it does not start."""
    mounts = [
        Mount(path=mount_path(i), media=file, video="h264", audio="aac")
        for i, file in enumerate(files)
    ]
    return launch(mounts)


@functools.cache
def _base_slices(base: Path) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    """The base file's slices, and where each group of pictures starts among them (the
    first slice of an IDR picture: NAL type 5, ``first_mb_in_slice`` 0)."""
    slices = tuple(h264_slices(base))
    starts = tuple(i for i, unit in enumerate(slices) if unit[0] & 0x1F == 5 and unit[1] & 0x80)
    return slices, starts


def reference_slices(file: Path, media: CameraMedia) -> tuple[bytes, ...]:
    """Every coded slice of ``file`` (one of :func:`camera_files`) in decode order: the
    base file's, rotated as ``file`` is (read once per process)."""
    base = camera_file(media)
    slices, starts = _base_slices(base)
    for groups, start in enumerate(starts):
        if rotated_name(base, groups) == file:
            return slices[start:] + slices[:start]
    raise ValueError(f"{file} is not one of the cameras' files")
