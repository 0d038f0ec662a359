"""The exporters the timeline bench times, and how it times them.

- ``export_clips`` (in this process; no interpreter start-up),
- ``mediaflow export`` (the command, start-up included),
- ``ffmpeg -f concat -safe 0 -i list -c copy -movflags +faststart`` (the peer: the
  ``ffmpeg`` binary, the list naming the clips with ``inpoint``/``outpoint``).
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mediaflow.timeline import ClipFile, export_clips

ORIGIN = 1_800_000_000.0
FLOW, NODE = "bench", "rec"
TOOLS = ("export_clips", "mediaflow export", "ffmpeg concat")


def export_with(
    tool: str, files: list[ClipFile], start: float, end: float, out: Path, folder: Path
) -> None:
    """Export ``[start, end)`` of ``files`` to ``out`` with ``tool`` (one of ``TOOLS``)."""
    if tool == "export_clips":
        export_clips(files, start, end, out)
    elif tool == "mediaflow export":
        data = ["--data", str(folder / "data")]
        times = ["--start", repr(start), "--end", repr(end)]
        run([sys.executable, "-m", "mediaflow", "-q", "export", FLOW, NODE, *times,
             "-o", str(out), *data])  # fmt: skip
    else:
        ffmpeg_concat(files, start, end, out)


def ffmpeg_concat(files: list[ClipFile], start: float, end: float, out: Path) -> None:
    """The peer: the concat demuxer over the clips the range touches, cut by inpoint and
    outpoint (clip times), packets copied. A file may be listed more than once."""
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
    run(["ffmpeg", "-v", "error", "-y", "-f", "concat", "-safe", "0", "-i", str(listing),
         "-c", "copy", "-movflags", "+faststart", str(out)])  # fmt: skip


def run(command: list[str]) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=900)


def timed(job: Callable[..., object], *args: object) -> tuple[float, float]:
    """Wall seconds of ``job(*args)``, and CPU seconds of this process and its children."""
    before = cpu()
    started = time.perf_counter()
    job(*args)
    return time.perf_counter() - started, cpu() - before


def cpu() -> float:
    """CPU seconds (user + system) of this process and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def peer_over_ours(rows: list[dict], key: str) -> dict[str, float]:
    """The peer's ``key`` over ``export_clips``' for each run (same range): median, spread."""
    peer = [r[key] for r in rows if r["tool"] == "ffmpeg concat"]
    ours = [r[key] for r in rows if r["tool"] == "export_clips"]
    return spread([p / max(o, 1e-9) for p, o in zip(peer, ours, strict=True)])


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
