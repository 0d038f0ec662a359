"""CPU per camera-second of the camera connector's encoders, against FFmpeg and GStreamer.

``python -m bench.capture [--frames 150] [--reps 3] [--json]``

One run makes 720p30 camera frames (``testsrc2`` with temporal noise, so the entropy
coder works as it would on a real sensor), stores them once as raw full-range I420,
and has every contender encode *those* frames:

- JPEG at quality 85: mediaflow's encoder (libjpeg-turbo from the YUV planes through
  ``simplejpeg``; and its fallback, FFmpeg's mjpeg through PyAV), the ``ffmpeg``
  command line (mjpeg at ``-q:v 4``, the quantiser that matches quality 85 in size
  and PSNR) and GStreamer's ``jpegenc quality=85`` (libjpeg-turbo). Bytes per frame
  and luma PSNR are printed so "matched quality" can be checked, not assumed;
- segments: mediaflow's :class:`~connectors._segments.SegmentEncoder` (2 s segments,
  H.264 fMP4 and VP8 WebM) against ``ffmpeg`` with the same encoder settings;
- MJPEG passthrough: the camera connector in a real flow on an MJPEG file, emitting
  the JPEGs as they are, against the same connector decoding and re-encoding them.

CPU is user+system time: ``getrusage(RUSAGE_SELF)`` around the work inside a child
process of its own for mediaflow, ``RUSAGE_CHILDREN`` around each ``ffmpeg`` /
``gst-launch-1.0`` run for the peers (their start-up included, which is why every
contender also gets a "read only" baseline and a "net" column). Each number is the
median of ``--reps`` runs. Peers come from Debian (``apt-get install ffmpeg
gstreamer1.0-tools gstreamer1.0-plugins-good``); a missing one is reported, not fatal.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from bench._lib.common import run_async

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


# -- the peers ------------------------------------------------------------------------------


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


# -- the run --------------------------------------------------------------------------------


def measure_all(workdir: Path, frames: int, reps: int) -> dict[str, dict[str, Any]]:
    """Every contender ``reps`` times, interleaved (rep 1 of all, then rep 2 ...) so a
    busy spell on the machine hits all of them alike; the median CPU of each."""
    (workdir / "peer-jpegs").mkdir(exist_ok=True)
    measures: dict[str, Callable[[], dict[str, Any]]] = {}
    for name in CHILDREN:
        measures[name] = functools.partial(run_child, name, workdir)
    for name, command in peer_commands(workdir).items():
        measures[name] = functools.partial(run_peer, command)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in measures}
    for rep in range(reps):
        print(f"  round {rep + 1} of {reps} ...", file=sys.stderr)
        for name, measure in measures.items():
            runs[name].append(measure())
    results: dict[str, dict[str, Any]] = {}
    for name, done in runs.items():
        good = [r for r in done if "error" not in r]
        results[name] = dict(good[-1] if good else done[-1])
        if good:
            results[name]["cpu"] = statistics.median(r["cpu"] for r in good)
    for name, prefix in (("ffmpeg-jpeg", "ffmpeg"), ("gst-jpeg", "gst")):
        jpegs = peer_jpegs(workdir, prefix)
        if jpegs and "error" not in results[name]:
            results[name].update(jpeg_quality(workdir, jpegs))
    for name in ("ffmpeg-h264", "ffmpeg-vp8"):
        out = workdir / ("peer.mp4" if name.endswith("h264") else "peer.webm")
        if out.exists():
            results[name]["bytes"] = out.stat().st_size / frames
    for result in results.values():
        result.setdefault("frames", frames)
    return results


def render(results: dict[str, dict[str, Any]], frames: int) -> str:
    """The table, then the targets with a verdict each."""

    def cps(name: str) -> float | None:
        cpu = results.get(name, {}).get("cpu")
        return None if cpu is None else float(cpu) / (frames / FPS)

    def net(name: str, base: str | None) -> float | None:
        total, read = cps(name), cps(base) if base else 0.0
        return None if total is None or read is None else total - read

    def fmt(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.4f}"

    rows: list[tuple[str, ...]] = [
        ("", "CPU s / camera s", "net of read", "size, PSNR(Y)", "ratio")
    ]

    def row(label: str, name: str, base: str | None = None, against: float | None = None) -> None:
        result = results.get(name, {})
        if "error" in result:
            rows.append((label, "n/a", "", "error: " + str(result["error"])[:40], ""))
            return
        own = net(name, base)
        quality = f"{result['bytes'] / 1024:.0f} KiB" if "bytes" in result else ""
        quality += f", {result['psnr']:.1f} dB" if "psnr" in result else ""
        ratio = "" if against is None or own is None else f"{own / against:.2f}x"
        rows.append((label, fmt(cps(name)), fmt(own) if base else "", quality, ratio))

    peers = [v for v in (net("ffmpeg-jpeg", "ffmpeg-read"), net("gst-jpeg", "gst-read")) if v]
    best_peer = min(peers, default=None)
    rows.append(("JPEG q85 of every frame (ratio: to the cheaper peer, net)",))
    row("  mediaflow: libjpeg-turbo (simplejpeg)", "jpeg-turbo", "read", best_peer)
    row("  mediaflow fallback: FFmpeg mjpeg (PyAV)", "jpeg-ffmpeg", "read", best_peer)
    row("  ffmpeg CLI: mjpeg -q:v 4", "ffmpeg-jpeg", "ffmpeg-read", best_peer)
    row("  GStreamer: jpegenc quality=85", "gst-jpeg", "gst-read", best_peer)
    row("  mediaflow, limited-range input", "jpeg-turbo-limited", "read", best_peer)
    row("  ffmpeg CLI, limited-range input", "ffmpeg-jpeg-limited", "ffmpeg-read", best_peer)
    row("  read only: PyAV", "read")
    row("  read only: ffmpeg CLI", "ffmpeg-read")
    row("  read only: GStreamer", "gst-read")
    for codec in ("h264", "vp8"):
        rows.append((f"{codec} segments of {SEGMENT_S:g} s (ratio: to ffmpeg, net)",))
        against = net(f"ffmpeg-{codec}", "ffmpeg-read")
        row(f"  mediaflow: SegmentEncoder {codec}", codec, "read", against)
        row(f"  ffmpeg CLI: {codec}, same settings", f"ffmpeg-{codec}", "ffmpeg-read", against)
    row("  ffmpeg CLI: vp8, one thread like mediaflow", "ffmpeg-vp8-1t", "ffmpeg-read", against)
    rows.append(("MJPEG camera, image path only (ratio: to re-encoding)",))
    row("  decode + re-encode", "pixels-reencode", None, cps("pixels-reencode"))
    row("  passthrough", "pixels-passthrough", None, cps("pixels-reencode"))
    rows.append(("camera connector in a flow, JPEG at 30 fps (ratio: to re-encoding)",))
    row("  MJPEG camera, decode + re-encode", "reencode", None, cps("reencode"))
    row("  MJPEG camera, passthrough", "passthrough", None, cps("reencode"))
    row("  raw camera (rawvideo file), encode", "connector-raw", None, cps("reencode"))
    row("  of which the store: save each JPEG", "store", None, cps("reencode"))
    widths = [max(len(r[i]) for r in rows if len(r) > i) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    lines += ["", f"{frames} frames of {WIDTH}x{HEIGHT} at {FPS} fps; CPU = user+sys, median."]
    lines += [
        "net: minus the same tool's read-only run (start-up, reading the frames). Flow rows",
        "are whole-process CPU: engine, and the store's save (hash, write, fsync, row).",
        "",
    ]
    totals = [v for v in (cps("ffmpeg-jpeg"), cps("gst-jpeg")) if v]
    targets = [
        ("JPEG net <= cheaper peer", net("jpeg-turbo", "read"), best_peer, 1.0),
        ("JPEG total <= cheaper peer", cps("jpeg-turbo"), min(totals, default=None), 1.0),
        ("h264 net <= ffmpeg", net("h264", "read"), net("ffmpeg-h264", "ffmpeg-read"), 1.0),
        ("vp8 net <= ffmpeg", net("vp8", "read"), net("ffmpeg-vp8", "ffmpeg-read"), 1.0),
        ("vp8 net <= ffmpeg 1 thread", net("vp8", "read"), net("ffmpeg-vp8-1t", "ffmpeg-read"),
         1.0),
        ("passthrough <= 1/5 re-encode (image path)", cps("pixels-passthrough"),
         cps("pixels-reencode"), 0.2),
        ("passthrough <= 1/5 re-encode (flow)", cps("passthrough"), cps("reencode"), 0.2),
    ]  # fmt: skip
    for label, ours, theirs, limit in targets:
        if ours is None or theirs is None:
            lines.append(f"target {label}: not measured")
            continue
        verdict = "met" if ours <= theirs * limit else "MISSED"
        lines.append(f"target {label}: {verdict} ({ours:.4f} vs {theirs:.4f})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capture", description=__doc__)
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(RESULT_MARK + json.dumps(CHILDREN[args.child](args.dir)))
        return 0
    with tempfile.TemporaryDirectory(prefix="mf-capture-") as tmp:
        workdir = Path(tmp)
        started = time.monotonic()
        print(f"making {args.frames} frames ...", file=sys.stderr)
        make_sources(workdir, args.frames)
        results = measure_all(workdir, args.frames, args.reps)
        print(f"done in {time.monotonic() - started:.0f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results, args.frames))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
