"""Exporting a range of a recording: mediaflow against ffmpeg's concat demuxer.

A numbered, beeping source (:mod:`bench.timeline.media`) of ``--minutes`` is recorded
once by mediaflow's recorder into ``--clip`` second clips; then, in the same run and
on the same clips, each of ``--runs`` ranges of ``--range`` seconds is exported by

- ``export_clips`` (in this process; no interpreter start-up),
- ``mediaflow export`` (the command, start-up included),
- ``ffmpeg -f concat -safe 0 -i list -c copy -movflags +faststart`` (the peer: the
  ``ffmpeg`` binary, the list naming the clips with ``inpoint``/``outpoint``),

timing wall clock and CPU, then decoding every output to read the first and last
frame numbers against the asked range, and the sound's beeps against the pictures.

``--hour`` exports an hour of 1080p instead, made of a short recording's clips laid
back to back again and again (:mod:`bench.timeline.hour`); ``--motion`` times the
motion node's analysis per camera at 5 fps against ffmpeg decoding the same JPEGs to
grey (:mod:`bench.timeline.motion`). Either or both replace the range export.

    python -m bench.timeline [--minutes 10] [--range 120] [--runs 3] [--json]
    python -m bench.timeline --hour [--minutes 2] [--range 3600] [--size 1920x1080]
    python -m bench.timeline --motion [--motion-seconds 60] [--motion-sizes 1920x1080,...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.timeline.hour import hour_bench, hour_table
from bench.timeline.media import Shown, make_source, record, retime, shown
from bench.timeline.motion import motion_bench, motion_table
from bench.timeline.tools import (
    FLOW,
    NODE,
    ORIGIN,
    TOOLS,
    export_with,
    peer_over_ours,
    say,
    timed,
)
from mediaflow.store import ArtifactStore
from mediaflow.timeline import ClipFile, RecordedClip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.timeline", description=__doc__)
    parser.add_argument(
        "--hour",
        action="store_true",
        help="export an hour of 1080p, a short recording's clips repeated",
    )
    parser.add_argument(
        "--motion",
        action="store_true",
        help="the motion node's CPU per camera at 5 fps, against ffmpeg",
    )
    parser.add_argument(
        "--minutes", type=float, help="recording length (10; with --hour 2, its clips repeated)"
    )
    parser.add_argument("--range", type=float, help="seconds exported (120; 3600 with --hour)")
    parser.add_argument("--runs", type=int, default=3, help="runs per tool (3)")
    parser.add_argument("--size", help="picture size (640x360; 1920x1080 with --hour)")
    parser.add_argument("--fps", type=int, default=15)
    parser.add_argument("--clip", type=float, default=10.0, help="recorder clip_s (10)")
    parser.add_argument("--kbps", type=int, help="video bit rate with --hour (4000)")
    parser.add_argument(
        "--motion-seconds",
        type=float,
        default=60.0,
        help="seconds of 5 fps frames per size with --motion (60)",
    )
    parser.add_argument(
        "--motion-sizes",
        default="1920x1080,1280x720",
        help="JPEG sizes with --motion (1920x1080,1280x720)",
    )
    parser.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    args = parser.parse_args(argv)  # fmt: skip
    hour_defaults = {"minutes": 2.0, "range": 3600.0, "size": "1920x1080", "kbps": 4000}
    plain_defaults = {"minutes": 10.0, "range": 120.0, "size": "640x360", "kbps": 0}
    for key, value in (hour_defaults if args.hour else plain_defaults).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not (args.hour or args.motion):
        if args.range >= args.minutes * 60:
            parser.error("--range must be shorter than the recording")
        report = export_bench(args)
        print(json.dumps(report, indent=2) if args.json else table(report))
        return 0
    reports: dict[str, Any] = {}
    if args.hour:
        reports["hour"] = hour_bench(args)
        if not args.json:
            print(hour_table(reports["hour"]), flush=True)
    if args.motion:
        reports["motion"] = motion_bench(args)
        if not args.json:
            print(("\n" if args.hour else "") + motion_table(reports["motion"]))
    if args.json:
        print(json.dumps(reports, indent=2))
    return 0


def export_bench(args: argparse.Namespace) -> dict[str, Any]:
    """The range export (module doc): make, record, export, read back; the report."""
    seconds = args.minutes * 60
    width, height = (int(n) for n in args.size.split("x"))
    with tempfile.TemporaryDirectory(prefix="bench-timeline-") as tmp:
        folder = Path(tmp)
        made = time.perf_counter()
        make_source(folder / "source.mp4", seconds, size=(width, height), fps=args.fps)
        say(f"source: {seconds:.0f} s of {args.size} at {args.fps} fps, "
            f"{time.perf_counter() - made:.1f} s")  # fmt: skip
        made = time.perf_counter()
        record(folder / "source.mp4", folder / "data", flow=FLOW, clip_s=args.clip, timeout=900)
        clips = retime(folder / "data", FLOW, NODE, ORIGIN)
        say(f"recorded {len(clips)} clips in {time.perf_counter() - made:.1f} s")
        rows = measure(folder, clips, args)
    return summarise(rows, args)


def ranges(total: float, length: float, runs: int) -> list[float]:
    """Starts spread over the recording, off the clip and frame grid (x.37 s)."""
    room = total - length - 1
    return [round((room * (k + 0.5) / runs) // 1 + 0.37, 2) for k in range(runs)]


def measure(folder: Path, clips: list[RecordedClip], args: argparse.Namespace) -> list[dict]:
    store = ArtifactStore(folder / "data")
    files = [ClipFile(c, store.path_for(c.ref.digest)) for c in clips]
    total = sum(c.duration for c in clips)
    rows = []
    for run, offset in enumerate(ranges(total, args.range, args.runs)):
        start, end = ORIGIN + offset, ORIGIN + offset + args.range
        outs = {tool: folder / f"{run}-{k}.mp4" for k, tool in enumerate(TOOLS)}
        for tool in TOOLS:
            wall, cpu = timed(export_with, tool, files, start, end, outs[tool], folder)
            row = {"tool": tool, "run": run, "start_s": offset, "wall_s": wall, "cpu_s": cpu}
            row.update(accuracy(shown(outs[tool]), offset, args.range, args.fps))
            row["bytes"] = outs[tool].stat().st_size
            rows.append(row)
            off = (row["first_off_frames"], row["length_off_frames"])
            say(f"run {run} {tool}: {wall * 1000:.0f} ms, first frame and length off by {off}")
    return rows


def accuracy(seen: Shown, offset: float, length: float, fps: int) -> dict[str, Any]:
    """First and last frame shown against the asked range, in frames; the sound's beeps
    against the pictures of the seconds they mark, in ms."""
    numbers = [n for _, n in seen.frames]
    first_wanted = math.ceil(round(offset * fps, 6))
    last_wanted = math.ceil(round((offset + length) * fps, 6)) - 1
    time_of = {n: at for at, n in seen.frames}
    skew = [
        beep - time_of[second * fps]
        for beep in seen.beeps
        if (second := round(numbers[0] / fps + beep)) * fps in time_of
    ]
    return {
        "first_off_frames": numbers[0] - first_wanted,
        "last_off_frames": numbers[-1] - last_wanted,
        "length_off_frames": len(numbers) - (last_wanted - first_wanted + 1),
        "first_time_s": seen.frames[0][0],
        "sound_skew_ms": max((abs(s) * 1000 for s in skew), default=None),
        "frames_missing_or_repeated": sum(b - a != 1 for a, b in itertools.pairwise(numbers)),
    }


def summarise(rows: list[dict], args: argparse.Namespace) -> dict[str, Any]:
    tools: dict[str, Any] = {}
    for tool in TOOLS:
        mine = [r for r in rows if r["tool"] == tool]
        walls = [r["wall_s"] for r in mine]
        tools[tool] = {
            "wall_median_s": statistics.median(walls),
            "wall_min_s": min(walls),
            "wall_max_s": max(walls),
            "cpu_median_s": statistics.median(r["cpu_s"] for r in mine),
            "first_off_frames": sorted({r["first_off_frames"] for r in mine}),
            "last_off_frames": sorted({r["last_off_frames"] for r in mine}),
            "length_off_frames": sorted({r["length_off_frames"] for r in mine}),
            "first_time_s": max(abs(r["first_time_s"]) for r in mine),
            "sound_skew_ms": max((r["sound_skew_ms"] or 0.0) for r in mine),
            "discontinuities": sum(r["frames_missing_or_repeated"] for r in mine),
        }
    return {
        "settings": vars(args),
        "tools": tools,
        "ffmpeg_over_export_clips": peer_over_ours(rows, "wall_s"),
        "ffmpeg_over_export_clips_cpu": peer_over_ours(rows, "cpu_s"),
        "rows": rows,
    }


def table(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [
        f"export of {s['range']:.0f} s from a {s['minutes']:g}-minute recording "
        f"({s['size']} at {s['fps']} fps, {s['clip']:g} s clips), {s['runs']} runs each",
        "",
        "| tool | wall median (min-max) | CPU median | first frame off | last frame off "
        "| frames off | first shown at | sound skew max | discontinuities |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for tool, t in report["tools"].items():
        lines.append(
            f"| {tool} | {t['wall_median_s'] * 1000:.0f} ms ({t['wall_min_s'] * 1000:.0f}-"
            f"{t['wall_max_s'] * 1000:.0f}) | {t['cpu_median_s'] * 1000:.0f} ms "
            f"| {t['first_off_frames']} | {t['last_off_frames']} | {t['length_off_frames']} "
            f"| {t['first_time_s']:.3f} s | {t['sound_skew_ms']:.1f} ms | {t['discontinuities']} |"
        )
    lines.append("")
    for what, key in (
        ("time", "ffmpeg_over_export_clips"),
        ("CPU", "ffmpeg_over_export_clips_cpu"),
    ):
        r = report[key]
        lines.append(
            f"ffmpeg concat {what} / export_clips {what}: {r['median']:.2f}x median "
            f"({r['min']:.2f}-{r['max']:.2f}x)"
        )
    return "\n".join(lines)
