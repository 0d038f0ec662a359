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
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.capture.children import CHILDREN, run_child
from bench.capture.frames import (
    FPS,
    HEIGHT,
    RESULT_MARK,
    SEGMENT_S,
    WIDTH,
    jpeg_quality,
    make_sources,
)
from bench.capture.peers import peer_commands, peer_jpegs, run_peer

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
