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

    python -m bench.timeline [--minutes 10] [--range 120] [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.timeline.media import Shown, make_source, record, retime, shown
from mediaflow.store import ArtifactStore
from mediaflow.timeline import ClipFile, RecordedClip, export_clips

ORIGIN = 1_800_000_000.0
FLOW, NODE = "bench", "rec"
TOOLS = ("export_clips", "mediaflow export", "ffmpeg concat")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.timeline", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="recording length (10)")
    parser.add_argument("--range", type=float, default=120.0, help="seconds exported (120)")
    parser.add_argument("--runs", type=int, default=3, help="ranges exported per tool (3)")
    parser.add_argument("--size", default="640x360", help="picture size (640x360)")
    parser.add_argument("--fps", type=int, default=15)
    parser.add_argument("--clip", type=float, default=10.0, help="recorder clip_s (10)")
    parser.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    args = parser.parse_args(argv)
    seconds = args.minutes * 60
    if args.range >= seconds:
        parser.error("--range must be shorter than the recording")
    width, height = (int(n) for n in args.size.split("x"))
    with tempfile.TemporaryDirectory(prefix="bench-timeline-") as tmp:
        folder = Path(tmp)
        made = time.perf_counter()
        make_source(folder / "source.mp4", seconds, size=(width, height), fps=args.fps)
        _say(f"source: {seconds:.0f} s of {args.size} at {args.fps} fps, "
             f"{time.perf_counter() - made:.1f} s")  # fmt: skip
        made = time.perf_counter()
        record(folder / "source.mp4", folder / "data", flow=FLOW, clip_s=args.clip, timeout=900)
        clips = retime(folder / "data", FLOW, NODE, ORIGIN)
        _say(f"recorded {len(clips)} clips in {time.perf_counter() - made:.1f} s")
        rows = measure(folder, clips, args)
    report = summarise(rows, args)
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0


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
            _say(f"run {run} {tool}: {wall * 1000:.0f} ms, first frame and length off by {off}")
    return rows


def export_with(
    tool: str, files: list[ClipFile], start: float, end: float, out: Path, folder: Path
) -> None:
    """Export ``[start, end)`` of ``files`` to ``out`` with ``tool`` (one of ``TOOLS``)."""
    if tool == "export_clips":
        export_clips(files, start, end, out)
    elif tool == "mediaflow export":
        data = ["--data", str(folder / "data")]
        times = ["--start", repr(start), "--end", repr(end)]
        _run(
            [
                sys.executable,
                "-m",
                "mediaflow",
                "-q",
                "export",
                FLOW,
                NODE,
                *times,
                "-o",
                str(out),
                *data,
            ]
        )
    else:
        ffmpeg_concat(files, start, end, out)


def ffmpeg_concat(files: list[ClipFile], start: float, end: float, out: Path) -> None:
    """The peer: the concat demuxer over the clips the range touches, cut by inpoint and
    outpoint (clip times), packets copied."""
    lines = ["ffconcat version 1.0"]
    for source in files:
        clip = source.clip
        if clip.end <= start or clip.start >= end:
            continue
        lines.append(f"file '{source.path}'")
        if start > clip.start:
            lines.append(f"inpoint {start - clip.start:.6f}")
        if end < clip.end:
            lines.append(f"outpoint {end - clip.start:.6f}")
    listing = out.with_suffix(".txt")
    listing.write_text("\n".join(lines) + "\n")
    _run(["ffmpeg", "-v", "error", "-y", "-f", "concat", "-safe", "0", "-i", str(listing),
          "-c", "copy", "-movflags", "+faststart", str(out)])  # fmt: skip


def _run(command: list[str]) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=600)


def timed(job: Callable[..., object], *args: object) -> tuple[float, float]:
    """Wall seconds of ``job(*args)``, and CPU seconds of this process and its children."""
    before = _cpu()
    started = time.perf_counter()
    job(*args)
    return time.perf_counter() - started, _cpu() - before


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


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
        "ffmpeg_over_export_clips": _ratios(rows, "wall_s"),
        "ffmpeg_over_export_clips_cpu": _ratios(rows, "cpu_s"),
        "rows": rows,
    }


def _ratios(rows: list[dict], key: str) -> dict[str, float]:
    """The peer's ``key`` over ``export_clips``' for each run (same range): median, spread."""
    peer = [r[key] for r in rows if r["tool"] == "ffmpeg concat"]
    ours = [r[key] for r in rows if r["tool"] == "export_clips"]
    ratios = [p / max(o, 1e-9) for p, o in zip(peer, ours, strict=True)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


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


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
