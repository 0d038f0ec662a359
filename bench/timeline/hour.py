"""An hour of 1080p exported: mediaflow against ffmpeg's concat demuxer, ``--hour``.

Encoding an hour of 1080p takes this 2-core machine most of an hour, so the hour is
made of a shorter recording repeated. A ``--minutes`` (2) source of ``--size``
(1920x1080) at ``--fps`` (15), H.264 at ``--kbps`` (4000, about a camera's main
stream: the numbered picture with grain) with a keyframe every second and AAC, is
recorded once through the camera and recorder into ``--clip`` second clips. Those
clips are noted in the timeline index again and again, back to back, each time later
on the clock, until they cover ``--range`` (3600) seconds and one more round; the
files are the same, listed many times (the export and the concat list both take a
file more than once). An export reads and writes every packet of the hour, as it
would from an hour of distinct clips: only the page cache may find them warmer.

Each of ``--runs`` ranges of the hour, starting off the clip and frame grid, is
exported by each tool (:mod:`bench.timeline.tools`). Reading an hour of 1080p back
takes minutes, so each output is checked by its first and last seconds, decoded
(:func:`look`), and by every video packet's time, demuxed: the first and last frame
numbers against the asked range, pictures shown against asked, pictures lost or
repeated, beeps against pictures at both ends, and where the sound ends against the
picture (a drift grows at every seam).
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from bench.timeline.media import beep_onsets, frame_number, make_source, record, retime
from bench.timeline.tools import (
    FLOW,
    NODE,
    ORIGIN,
    TOOLS,
    export_with,
    peer_over_ours,
    say,
    spread,
    timed,
)
from mediaflow.store import ArtifactStore
from mediaflow.timeline import ClipFile, RecordedClip, TimelineIndex

GLIMPSE_S = 4.0  # seconds decoded at each end of an output
GRAIN = 12  # luma levels of noise on the source's pictures, for a camera's bit rate


def hour_bench(args: argparse.Namespace) -> dict[str, Any]:
    """Make, record, repeat, export and check (module doc); the report."""
    seconds = args.minutes * 60
    width, height = (int(n) for n in args.size.split("x"))
    with tempfile.TemporaryDirectory(prefix="bench-timeline-hour-") as tmp:
        folder = Path(tmp)
        made = time.perf_counter()
        make_source(folder / "source.mp4", seconds, size=(width, height), fps=args.fps,
                    grain=GRAIN, bit_rate=args.kbps * 1000)  # fmt: skip
        say(f"source: {seconds:.0f} s of {args.size} at {args.fps} fps, "
            f"{time.perf_counter() - made:.1f} s")  # fmt: skip
        made = time.perf_counter()
        record(folder / "source.mp4", folder / "data", flow=FLOW, clip_s=args.clip, timeout=900)
        once = retime(folder / "data", FLOW, NODE, ORIGIN)
        clips = repeat(folder / "data", once, args.range + seconds)
        store = ArtifactStore(folder / "data")
        files = [ClipFile(c, store.path_for(c.ref.digest)) for c in clips]
        size = sum(f.path.stat().st_size for f in files[: len(once)])
        say(f"recorded {len(once)} clips ({size / 1e6:.0f} MB) in "
            f"{time.perf_counter() - made:.1f} s; noted as {len(clips)} clips to "
            f"{clips[-1].end - ORIGIN:.0f} s")  # fmt: skip
        rows = measure(folder, files, round(seconds * args.fps), args)
    return summarise(
        rows, args, recorded=len(once), laid=len(clips), mbit_s=size * 8 / seconds / 1e6
    )


def repeat(data_dir: Path, once: list[RecordedClip], cover: float) -> list[RecordedClip]:
    """``once`` (back to back from ``ORIGIN``) noted again after itself until the clips
    cover ``cover`` seconds; all the clips, in order."""
    cycle = once[-1].end - once[0].start
    rounds = math.ceil(cover / cycle)
    index = TimelineIndex.in_data_dir(data_dir)
    try:
        clips = list(once)
        for again in range(1, rounds):
            for clip in once:
                shift = again * cycle
                moved = RecordedClip(
                    clip.flow, clip.node, clip.start + shift, clip.end + shift, clip.ref,
                    clip.sources,
                )  # fmt: skip
                index.note_clip(moved)
                clips.append(moved)
        return clips
    finally:
        index.close()


def measure(
    folder: Path, files: list[ClipFile], period: int, args: argparse.Namespace
) -> list[dict[str, Any]]:
    total = files[-1].clip.end - ORIGIN
    rows = []
    for run, offset in enumerate(_starts(total, args.range, args.runs)):
        start, end = ORIGIN + offset, ORIGIN + offset + args.range
        for k, tool in enumerate(TOOLS):
            out = folder / f"{run}-{k}.mp4"
            wall, cpu = timed(export_with, tool, files, start, end, out, folder)
            row = {"tool": tool, "run": run, "start_s": offset, "wall_s": wall, "cpu_s": cpu,
                   "bytes": out.stat().st_size}  # fmt: skip
            row.update(accuracy(look(out), offset, args.range, args.fps, period))
            out.unlink()  # an hour of 1080p is gigabytes
            rows.append(row)
            say(f"run {run} {tool}: {wall:.2f} s, CPU {cpu:.2f} s; first/last frame off "
                f"{row['first_off_frames']}/{row['last_off_frames']}, sound ends "
                f"{row['sound_end_off_ms']:+.0f} ms from the picture")  # fmt: skip
    return rows


def _starts(total: float, length: float, runs: int) -> list[float]:
    """Starts spread over the room the clips leave, off the clip and frame grid."""
    room = total - length - 1
    return [round((room * (k + 0.5) / runs) // 1 + 0.37, 2) for k in range(runs)]


@dataclass(frozen=True)
class Look:
    """An output read at both ends, and its packets' times."""

    head: list[tuple[float, int]]  # (time, frame number) of the first GLIMPSE_S seconds
    tail: list[tuple[float, int]]  # ... and of the last
    head_beeps: list[float]
    tail_beeps: list[float]
    shown: list[float]  # every picture's presentation time, from packets (no decode)
    picture_end: float  # the last picture's time plus its duration
    sound_end: float | None  # the last sound packet's end


def look(path: Path) -> Look:
    """Decode ``path``'s first and last :data:`GLIMPSE_S` seconds; demux the rest."""
    with av.open(str(path)) as container:
        video = container.streams.video[0]
        shown, durations = [], []
        sound_end = None
        for packet in container.demux(*container.streams):
            if packet.pts is None or packet.time_base is None:
                continue
            at = float(packet.pts * packet.time_base)
            if packet.stream.type == "video" and not packet.is_discard:
                shown.append(at)
                durations.append(float(packet.duration * packet.time_base))
            elif packet.stream.type == "audio":
                end = at + float(packet.duration * packet.time_base)
                sound_end = end if sound_end is None else max(sound_end, end)
        shown.sort()
        container.seek(0)
        head = _pictures(container, 0.0, GLIMPSE_S)
        tail_from = shown[-1] - GLIMPSE_S
        container.seek(int(tail_from / video.time_base), stream=video)
        tail = _pictures(container, tail_from, math.inf)
        head_beeps = _beeps(container, 0.0, GLIMPSE_S)
        tail_beeps = _beeps(container, tail_from, math.inf)
    picture_end = shown[-1] + (durations[-1] or 0.0)
    return Look(head, tail, head_beeps, tail_beeps, shown, picture_end, sound_end)


def _pictures(container: Any, since: float, until: float) -> list[tuple[float, int]]:
    """``(time, number)`` of the pictures shown in ``[since, until)``, from where the
    container was sought to."""
    found = []
    for frame in container.decode(video=0):
        at = float(frame.time or 0.0)
        if at >= until:
            break
        if at >= since - 1e-6:
            found.append((at, frame_number(frame)))
    return found


def _beeps(container: Any, since: float, until: float) -> list[float]:
    audio = container.streams.audio
    if not audio:
        return []
    container.seek(int(max(since - 1, 0) / audio[0].time_base), stream=audio[0])
    chunks = []
    for chunk in container.decode(audio=0):
        at = float(chunk.time or 0.0)
        if at + chunk.samples / chunk.sample_rate < since:
            continue
        chunks.append(chunk)
        if at >= until:
            break
    if not chunks:
        return []
    begins, rate = float(chunks[0].time or 0.0), chunks[0].sample_rate
    pcm = np.concatenate([c.to_ndarray()[0] for c in chunks])
    return [b for at in beep_onsets(pcm, rate) if (b := begins + at / rate) >= since]


def unwrap(numbers: list[int], period: int, near: int) -> list[int]:
    """Frame numbers of a source ``period`` frames long shown again and again, as frame
    numbers of the repeated whole: the first the one nearest ``near``, each next the
    first at or after the one before with its number (a repeat stays, a skip jumps)."""
    if not numbers:
        return []
    first = numbers[0] + period * round((near - numbers[0]) / period)
    out = [first]
    for number in numbers[1:]:
        out.append(out[-1] + (number - out[-1]) % period)
    return out


def _skews(
    pictures: list[tuple[float, int]], beeps: list[float], fps: int, period: int
) -> list[float]:
    """Each beep against the picture of the second it marks: the second of the picture
    shown when it is heard, rounded (so a drift is seen modulo a second). Not the beep
    of the source's first second: it follows a seam no camera makes (the recording's
    end, then its start with the sound encoder's priming, which both tools trim)."""
    time_of = {number: at for at, number in pictures}
    skews = []
    for beep in beeps:
        _, number = min(pictures, key=lambda p: abs(p[0] - beep))
        second = round(number / fps) * fps % period
        if second and second in time_of:
            skews.append(beep - time_of[second])
    return skews


def accuracy(seen: Look, offset: float, length: float, fps: int, period: int) -> dict[str, Any]:
    """:func:`bench.timeline.main.accuracy`'s numbers for an output read by :func:`look`
    (module doc), frame numbers repeating every ``period`` frames."""
    first_wanted = math.ceil(round(offset * fps, 6))
    last_wanted = math.ceil(round((offset + length) * fps, 6)) - 1
    head = unwrap([n for _, n in seen.head], period, first_wanted)
    tail = unwrap([n for _, n in seen.tail], period, last_wanted)
    steps = [b - a for a, b in itertools.pairwise(seen.shown)]
    numbered = (tail[-1] - head[0] + 1) if head and tail else 0
    skews = _skews(seen.head, seen.head_beeps, fps, period)
    skews += _skews(seen.tail, seen.tail_beeps, fps, period)
    return {
        "first_off_frames": head[0] - first_wanted,
        "last_off_frames": tail[-1] - last_wanted,
        "length_off_frames": len(seen.shown) - (last_wanted - first_wanted + 1),
        "first_time_s": seen.head[0][0],
        "sound_skew_ms": max((abs(s) * 1000 for s in skews), default=None),
        "sound_end_off_ms": None
        if seen.sound_end is None
        else (seen.sound_end - seen.picture_end) * 1000,
        "frames_missing_or_repeated": sum(b - a != 1 for a, b in itertools.pairwise(head))
        + sum(b - a != 1 for a, b in itertools.pairwise(tail))
        + abs(numbered - len(seen.shown)),
        "step_off_max_ms": max((abs(s - 1 / fps) * 1000 for s in steps), default=0.0),
        # Time the pictures do not account for (gaps at seams): the output's clock
        # running ahead of the recording's.
        "stretch_ms": (seen.picture_end - seen.head[0][0] - len(seen.shown) / fps) * 1000,
    }


def summarise(
    rows: list[dict[str, Any]], args: argparse.Namespace, **source: Any
) -> dict[str, Any]:
    tools: dict[str, Any] = {}
    for tool in TOOLS:
        mine = [r for r in rows if r["tool"] == tool]
        ends = [abs(r["sound_end_off_ms"]) for r in mine if r["sound_end_off_ms"] is not None]
        tools[tool] = {
            "wall_s": spread([r["wall_s"] for r in mine]),
            "cpu_s": spread([r["cpu_s"] for r in mine]),
            "first_off_frames": sorted({r["first_off_frames"] for r in mine}),
            "last_off_frames": sorted({r["last_off_frames"] for r in mine}),
            "length_off_frames": sorted({r["length_off_frames"] for r in mine}),
            "first_time_s": max(abs(r["first_time_s"]) for r in mine),
            "sound_skew_ms": max((r["sound_skew_ms"] or 0.0) for r in mine),
            "sound_end_off_ms": max(ends, default=None),
            "discontinuities": sum(r["frames_missing_or_repeated"] for r in mine),
            "step_off_max_ms": max(r["step_off_max_ms"] for r in mine),
            "stretch_ms": max(r["stretch_ms"] for r in mine),
            "mbytes": statistics.median(r["bytes"] for r in mine) / 1e6,
        }
    return {
        "settings": vars(args),
        "source": source,
        "tools": tools,
        "ffmpeg_over_export_clips": peer_over_ours(rows, "wall_s"),
        "ffmpeg_over_export_clips_cpu": peer_over_ours(rows, "cpu_s"),
        "rows": rows,
    }


def hour_table(report: dict[str, Any]) -> str:
    s, src = report["settings"], report["source"]
    lines = [
        f"export of {s['range']:.0f} s of {s['size']} at {s['fps']} fps "
        f"({src['mbit_s']:.1f} Mbit/s): the {src['recorded']} clips ({s['clip']:g} s) of a "
        f"{s['minutes']:g}-minute recording noted {src['laid'] // src['recorded']} times "
        "back to back (an hour of 1080p takes too long to encode here), "
        f"{s['runs']} runs each; median (min-max)",
        "",
        "| tool | wall | CPU | first frame off | last frame off | frames off "
        "| sound skew max (ends) | sound end - picture end | lost/repeated "
        "| gaps in the picture's clock | MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for tool, t in report["tools"].items():
        end = t["sound_end_off_ms"]
        lines.append(
            f"| {tool} | {_s(t['wall_s'])} | {_s(t['cpu_s'])} | {t['first_off_frames']} "
            f"| {t['last_off_frames']} | {t['length_off_frames']} | {t['sound_skew_ms']:.1f} ms "
            f"| {'-' if end is None else f'{end:.0f} ms'} | {t['discontinuities']} "
            f"| {t['stretch_ms']:.0f} ms (largest {t['step_off_max_ms']:.0f}) "
            f"| {t['mbytes']:.0f} |"
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


def _s(values: dict[str, float]) -> str:
    return f"{values['median']:.2f} s ({values['min']:.2f}-{values['max']:.2f})"
