"""The motion node's CPU per camera at 5 fps, against ffmpeg, ``--motion``.

A moving-box scene (a grey box crossing a textured picture, with a sensor's noise on
every frame) is made as JPEGs (libjpeg-turbo through ``simplejpeg``, quality 85,
4:2:0, as cameras send them) of each of ``--motion-sizes``, ``--motion-seconds`` at
5 fps. Then, ``--runs`` times in the same run, on the same bytes:

- **mediaflow**: the motion node's own analysis, :func:`decode_gray` and
  :meth:`MotionAnalyser.observe` (``mediaflow/nodes/motion_detect.py``, the node's
  defaults), frame after frame in one thread, timed by that thread's CPU clock. The
  node adds reading the artifact and a hand-off to a worker thread per frame; the
  analysis is what grows with the picture.
- **ffmpeg** (the peer): ``ffmpeg -f image2pipe -c:v mjpeg -i - -vf
  scale=160:-1,format=gray -f null -`` fed the same JPEGs, timed by its CPU
  (``getrusage`` of children) less that of the same command given one JPEG (its
  start-up, in the same run): what a pipeline that lets ffmpeg decode a camera's
  frames to a small grey picture (as Frigate's detect stream does) spends before any
  differencing. The ``ffmpeg`` binary rather than PyAV: it is the tool people run
  beside a recorder, and PyAV's per-frame Python would be charged to the peer.

CPU seconds per second of video, times 100, is the per cent of one core a camera
takes at 5 fps.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg  # type: ignore[import-untyped]  # ships no type information

from bench.timeline.tools import cpu, say, spread
from mediaflow.nodes.motion_detect import MotionAnalyser, ZoneLayout, decode_gray

FPS = 5
MIN_AREA = 0.01  # the node's default


def motion_bench(args: argparse.Namespace) -> dict[str, Any]:
    """Make the scenes, then time both sides ``args.runs`` times (module doc)."""
    sizes = [tuple(int(n) for n in size.split("x")) for size in args.motion_sizes.split(",")]
    frames = round(args.motion_seconds * FPS)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-timeline-motion-") as tmp:
        for width, height in sizes:
            made = time.perf_counter()
            jpegs = scene(width, height, frames)
            stream = Path(tmp) / f"{width}x{height}.mjpeg"
            stream.write_bytes(b"".join(jpegs))
            one = Path(tmp) / f"{width}x{height}-one.mjpeg"
            one.write_bytes(jpegs[0])
            say(f"motion: {frames} JPEGs of {width}x{height} "
                f"({stream.stat().st_size / frames / 1000:.0f} kB each) in "
                f"{time.perf_counter() - made:.1f} s")  # fmt: skip
            rows = []
            for run in range(args.runs):
                ours, moving = analyse(jpegs)
                decode = decode_only(jpegs)
                startup = ffmpeg_gray(one)
                peer = ffmpeg_gray(stream) - startup
                rows.append({"run": run, "ours_cpu_s": ours, "decode_cpu_s": decode,
                             "ffmpeg_cpu_s": peer, "ffmpeg_startup_cpu_s": startup,
                             "moving_frames": moving})  # fmt: skip
                say(f"motion {width}x{height} run {run}: ours {ours:.2f} s CPU (decode "
                    f"{decode:.2f}), ffmpeg {peer:.2f} s, {moving} frames moving")  # fmt: skip
            results.append(_summary(f"{width}x{height}", args.motion_seconds, frames, rows))
    return {"settings": vars(args), "fps": FPS, "sizes": results}


def scene(width: int, height: int, frames: int) -> list[bytes]:
    """``frames`` JPEGs of a box crossing a textured picture, with noise (module doc)."""
    rng = np.random.default_rng(28)
    texture = rng.integers(40, 200, (height // 8, width // 8), np.int16)
    ground = np.kron(texture, np.ones((8, 8), np.int16))[:height, :width]
    ground = np.pad(ground, ((0, height - ground.shape[0]), (0, width - ground.shape[1])), "edge")
    noises = [rng.integers(-4, 5, (height, width), np.int16) for _ in range(5)]
    box_w, box_h = width // 6, height // 3
    jpegs = []
    for k in range(frames):
        luma = ground + noises[k % 5]
        # Across and back every 10 s; out of the picture for the first 2 s of each 10.
        phase = (k / FPS) % 10
        if phase >= 2:
            x = round((phase - 2) / 8 * (width - box_w))
            y = height // 3
            luma[y : y + box_h, x : x + box_w] = 230 + noises[k % 5][y : y + box_h, x : x + box_w]
        gray = np.clip(luma, 0, 255).astype(np.uint8)
        rgb = np.ascontiguousarray(np.repeat(gray[:, :, np.newaxis], 3, axis=2))
        jpegs.append(simplejpeg.encode_jpeg(rgb, quality=85, colorsubsampling="420"))
    return jpegs


def analyse(jpegs: list[bytes]) -> tuple[float, int]:
    """The node's analysis of every frame: this thread's CPU seconds, and how many
    frames moved (at the node's defaults)."""
    analyser = MotionAnalyser(ZoneLayout(), threshold=25.0, background_s=5.0)
    moving = 0
    started = time.thread_time()
    for k, data in enumerate(jpegs):
        fractions = analyser.observe(decode_gray(data), k / FPS)
        moving += fractions[None] >= MIN_AREA
    return time.thread_time() - started, moving


def decode_only(jpegs: list[bytes]) -> float:
    """CPU seconds of :func:`decode_gray` alone over every frame."""
    started = time.thread_time()
    for data in jpegs:
        decode_gray(data)
    return time.thread_time() - started


def ffmpeg_gray(stream: Path) -> float:
    """CPU seconds of ffmpeg decoding the JPEGs of ``stream`` to a 160-wide grey picture."""
    before = cpu()
    with stream.open("rb") as feed:
        subprocess.run(
            ["ffmpeg", "-v", "error", "-f", "image2pipe", "-c:v", "mjpeg", "-i", "-",
             "-vf", "scale=160:-1,format=gray", "-f", "null", "-"],
            stdin=feed, check=True, timeout=600,
        )  # fmt: skip
    return cpu() - before


def _summary(size: str, seconds: float, frames: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    def per_second(key: str) -> dict[str, float]:
        return spread([r[key] / seconds for r in rows])

    return {
        "size": size,
        "frames": frames,
        "ours_cpu_per_s": per_second("ours_cpu_s"),
        "decode_cpu_per_s": per_second("decode_cpu_s"),
        "ffmpeg_cpu_per_s": per_second("ffmpeg_cpu_s"),
        "ffmpeg_startup_cpu_s": spread([r["ffmpeg_startup_cpu_s"] for r in rows]),
        "ffmpeg_over_ours": spread([r["ffmpeg_cpu_s"] / r["ours_cpu_s"] for r in rows]),
        "moving_frames": sorted({r["moving_frames"] for r in rows}),
        "rows": rows,
    }


def motion_table(report: dict[str, Any]) -> str:
    runs = report["settings"]["runs"]
    lines = [
        f"motion analysis at {report['fps']} fps, CPU per second of video = share of one "
        f"core per camera; {runs} runs, median (min-max); ffmpeg's start-up (one JPEG, "
        f"{report['sizes'][0]['ffmpeg_startup_cpu_s']['median'] * 1000:.0f} ms CPU) taken off",
        "",
        "| JPEG size | mediaflow (decode_gray + MotionAnalyser) | decode_gray alone "
        "| ffmpeg mjpeg -> scale=160 gray | ffmpeg / mediaflow | frames moving |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for size in report["sizes"]:
        lines.append(
            f"| {size['size']} | {_pct(size['ours_cpu_per_s'])} | {_pct(size['decode_cpu_per_s'])} "
            f"| {_pct(size['ffmpeg_cpu_per_s'])} | {_x(size['ffmpeg_over_ours'])} "
            f"| {size['moving_frames']} of {size['frames']} |"
        )
    return "\n".join(lines)


def _pct(values: dict[str, float]) -> str:
    return f"{values['median'] * 100:.2f} % ({values['min'] * 100:.2f}-{values['max'] * 100:.2f})"


def _x(values: dict[str, float]) -> str:
    return f"{values['median']:.2f}x ({values['min']:.2f}-{values['max']:.2f})"
