"""The peers of ``bench.capture``: the same frames through the ``ffmpeg`` and
``gst-launch-1.0`` command lines, their CPU from ``RUSAGE_CHILDREN``.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.capture.frames import FPS, HEIGHT, QUALITY, SEGMENT_S, WIDTH, cpu_seconds


def run_peer(command: Sequence[str]) -> dict[str, Any]:
    if shutil.which(command[0]) is None:
        return {"error": f"{command[0]} is not installed"}
    before = cpu_seconds(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return {"cpu": cpu_seconds(resource.RUSAGE_CHILDREN) - before}


def ffmpeg(workdir: Path, pix_fmt: str, *output: str) -> list[str]:
    return [
        "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
        "-f", "rawvideo", "-pix_fmt", pix_fmt, "-s", f"{WIDTH}x{HEIGHT}", "-r", str(FPS),
        "-i", str(workdir / "raw.yuv"), *output,
    ]  # fmt: skip


def gst(workdir: Path, *tail: str) -> list[str]:
    return [
        "gst-launch-1.0", "-q", "filesrc", f"location={workdir / 'raw.yuv'}", "!",
        "rawvideoparse", f"width={WIDTH}", f"height={HEIGHT}", "format=i420",
        f"framerate={FPS}/1", "!", *tail,
    ]  # fmt: skip


def peer_commands(workdir: Path) -> dict[str, list[str]]:
    jpegs = workdir / "peer-jpegs"
    vp8_bits = str(int(WIDTH * HEIGHT * FPS * 0.1))
    fmp4 = "frag_keyframe+empty_moov+default_base_moof"
    keyframes = f"expr:gte(t,n_forced*{SEGMENT_S})"
    return {
        "ffmpeg-read": ffmpeg(workdir, "yuvj420p", "-f", "null", "-"),
        "ffmpeg-jpeg": ffmpeg(workdir, "yuvj420p", "-c:v", "mjpeg", "-q:v", "4",
                              str(jpegs / "ffmpeg-%04d.jpg")),
        "ffmpeg-jpeg-limited": ffmpeg(workdir, "yuv420p", "-c:v", "mjpeg", "-q:v", "4",
                                      "-f", "image2pipe", "/dev/null"),
        "gst-read": gst(workdir, "fakesink"),
        "gst-jpeg": gst(workdir, "jpegenc", f"quality={QUALITY}", "!", "multifilesink",
                        f"location={jpegs / 'gst-%04d.jpg'}"),
        "ffmpeg-h264": ffmpeg(workdir, "yuvj420p", "-c:v", "libx264", "-preset", "veryfast",
                              "-bf", "0", "-force_key_frames", keyframes,
                              "-f", "mp4", "-movflags", fmp4, str(workdir / "peer.mp4")),
        "ffmpeg-vp8": ffmpeg(workdir, "yuvj420p", "-c:v", "libvpx", "-deadline", "realtime",
                             "-cpu-used", "8", "-lag-in-frames", "0", "-crf", "10",
                             "-b:v", vp8_bits, "-force_key_frames", keyframes,
                             "-f", "webm", str(workdir / "peer.webm")),
        "ffmpeg-vp8-1t": ffmpeg(workdir, "yuvj420p", "-c:v", "libvpx", "-threads", "1",
                                "-deadline", "realtime", "-cpu-used", "8", "-lag-in-frames",
                                "0", "-crf", "10", "-b:v", vp8_bits, "-force_key_frames",
                                keyframes, "-f", "webm", "/dev/null"),
    }  # fmt: skip


def peer_jpegs(workdir: Path, prefix: str) -> list[bytes]:
    files = sorted((workdir / "peer-jpegs").glob(f"{prefix}-*.jpg"))
    return [f.read_bytes() for f in files]
