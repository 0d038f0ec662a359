"""mediaflow's side of ``bench.capture``: each contender measured in a child process
of its own (``python -m bench.capture --child NAME``), its CPU from ``getrusage``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av

from bench._lib.common import run_async
from bench.capture.frames import (
    FPS,
    HEIGHT,
    QUALITY,
    RESULT_MARK,
    SEGMENT_S,
    WIDTH,
    cpu_seconds,
    decoded_frames,
    jpeg_quality,
)


def child_read(workdir: Path) -> dict[str, Any]:
    start = cpu_seconds()
    count = sum(1 for _ in decoded_frames(workdir))
    return {"cpu": cpu_seconds() - start, "frames": count}


def child_jpeg(workdir: Path, encoder_name: str, pix_fmt: str = "yuvj420p") -> dict[str, Any]:
    from connectors._jpeg import FfmpegJpegEncoder, TurboJpegEncoder

    cls = TurboJpegEncoder if encoder_name == "turbo" else FfmpegJpegEncoder
    encoder = cls(QUALITY)
    encoder.encode(next(decoded_frames(workdir, pix_fmt)))  # warm up (imports, tables)
    jpegs = []
    start = cpu_seconds()
    for frame in decoded_frames(workdir, pix_fmt):
        jpegs.append(encoder.encode(frame))
    cpu = cpu_seconds() - start
    if pix_fmt != "yuvj420p":  # converted from limited range: not comparable to the raw
        return {"cpu": cpu, "frames": len(jpegs), "bytes": statistics.mean(map(len, jpegs))}
    return {"cpu": cpu, "frames": len(jpegs), **jpeg_quality(workdir, jpegs)}


def child_segments(workdir: Path, codec: str) -> dict[str, Any]:
    from connectors._segments import SegmentEncoder, SegmentJob
    from connectors._timeline import Epoch

    encoder = SegmentEncoder(codec, SEGMENT_S, fps=FPS)  # type: ignore[arg-type]
    epoch = Epoch(0, 0.0, None)
    start = cpu_seconds()
    count, size = 0, 0
    for index, frame in enumerate(decoded_frames(workdir)):
        done = encoder.push(SegmentJob(frame, None, index / FPS, 0.0, epoch))
        size += sum(len(s.data) for s in done)
        count += 1
    size += sum(len(s.data) for s in encoder.flush())
    return {"cpu": cpu_seconds() - start, "frames": count, "bytes": size / count}


def child_connector(workdir: Path, source: str, reencode: bool) -> dict[str, Any]:
    """The camera connector in a real flow (store and state on disk), JPEGs at 30 fps."""
    from mediaflow import EngineSettings, FlowBuilder, FlowSession

    options: dict[str, Any] = {"fps": FPS, "realtime": False, "video": False}
    if reencode:
        options["size"] = f"{WIDTH}x{HEIGHT}"  # a resize asked: no passthrough
    flow = FlowBuilder("bench").add("cam", "camera", device=f"file:{workdir / source}", **options)

    async def run() -> tuple[float, int]:
        with tempfile.TemporaryDirectory() as data:
            session = FlowSession(flow.build(), Path(data), settings=EngineSettings.from_env())
            start = cpu_seconds()
            await session.start()
            await session.wait(until_idle=True)
            await session.stop()
            cpu = cpu_seconds() - start
            node = session.node("cam")
            emitted = node.video_run.images.emitted if node and node.video_run else 0  # type: ignore[attr-defined]
            return cpu, emitted

    cpu, emitted = run_async(run())
    return {"cpu": cpu, "frames": emitted}


def child_pixels(workdir: Path, passthrough: bool) -> dict[str, Any]:
    """The connector's image path without the store: open the MJPEG file through
    ``devices.open_video`` and run each frame through the JPEG lane's work."""
    from connectors._jpeg import make_jpeg_encoder
    from connectors._timeline import Epoch
    from connectors._video import JpegJob, JpegWork
    from devices import open_video

    work = JpegWork(make_jpeg_encoder(QUALITY), None)
    epoch = Epoch(0, 0.0, None)

    async def run() -> int:
        source = open_video(
            f"file:{workdir / 'mjpeg.mkv'}", realtime=False, passthrough=passthrough
        )
        count = 0
        async with source:
            async for item in source:
                job = JpegJob(
                    item.frame, item.packet, item.pts, 0.0, item.width, item.height, epoch
                )
                count += len(work.push(job))
        return count

    start = cpu_seconds()
    count = run_async(run())
    return {"cpu": cpu_seconds() - start, "frames": count}


def child_store(workdir: Path) -> dict[str, Any]:
    """What the flow rows pay the store: saving the MJPEG camera's JPEGs, one by one."""
    from mediaflow.store import ArtifactStore

    with av.open(str(workdir / "mjpeg.mkv")) as container:
        jpegs = [bytes(p) for p in container.demux(video=0) if p.size]
    with tempfile.TemporaryDirectory() as data:
        store = ArtifactStore(data)
        start = cpu_seconds()
        for seq, jpeg in enumerate(jpegs):
            store.save_sync(jpeg, "image/jpeg", {"seq": seq})
        cpu = cpu_seconds() - start
        store.close()
    return {"cpu": cpu, "frames": len(jpegs)}


CHILDREN: dict[str, Callable[[Path], dict[str, Any]]] = {
    "read": child_read,
    "jpeg-turbo": lambda d: child_jpeg(d, "turbo"),
    "jpeg-ffmpeg": lambda d: child_jpeg(d, "ffmpeg"),
    "jpeg-turbo-limited": lambda d: child_jpeg(d, "turbo", "yuv420p"),
    "h264": lambda d: child_segments(d, "h264"),
    "vp8": lambda d: child_segments(d, "vp8"),
    "pixels-passthrough": lambda d: child_pixels(d, passthrough=True),
    "pixels-reencode": lambda d: child_pixels(d, passthrough=False),
    "passthrough": lambda d: child_connector(d, "mjpeg.mkv", reencode=False),
    "reencode": lambda d: child_connector(d, "mjpeg.mkv", reencode=True),
    "connector-raw": lambda d: child_connector(d, "raw.mkv", reencode=False),
    "store": child_store,
}


def run_child(name: str, workdir: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.capture", "--child", name, "--dir", str(workdir)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return dict(json.loads(line[len(RESULT_MARK) :]))
    return {"error": (done.stderr.strip().splitlines() or ["no result"])[-1]}
