"""``mediaflow export FLOW NODE --start T --end T -o FILE [--data DIR]``: a recorded range
as one MP4 (:func:`mediaflow.timeline.export.export_recording`).

Times are ISO 8601 (``2026-12-06T14:02:00+01:00``, ``...Z``; without a zone, local
time) or epoch seconds (``1796600000.5``). The clips come from the timeline index and
the store in the data directory. A progress line goes to stderr during a long export
(a terminal, or ``-v``); the result, and each gap closed up in the file, to stdout.

Exit codes: 0 written; 1 a failure reading or writing media; 2 bad input (a bad time,
an empty or too long range, an unknown flow or recorder, nothing recorded there,
clips that cannot be exported as MP4), one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import av.error

from mediaflow.cli.args import add_data_option
from mediaflow.cli.progress import ProgressLine, is_terminal
from mediaflow.config import ConfigError, default_data_dir, env_float
from mediaflow.store import ArtifactStore
from mediaflow.timeline import TimelineIndex, times
from mediaflow.timeline.cut import DEFAULT_MAX_SPAN_S, ExportError
from mediaflow.timeline.export import (
    MAX_SPAN_ENV,
    ExportOptions,
    ExportProgress,
    ExportResult,
    export_recording,
)
from mediaflow.timeline.index import FILE_NAME
from mediaflow.timeline.times import iso

log = logging.getLogger("mediaflow.export")

COMMAND = "export"


class BadInput(Exception):
    """Input the command refuses (exit 2)."""


def add_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add the ``export`` command to ``subparsers`` (``add_subparsers()``'s result)."""
    parser = subparsers.add_parser(
        COMMAND,
        help="write a recorded range of a recorder node as one MP4",
        description="Write [START, END) of recorder NODE of FLOW as one seekable MP4, "
        "without re-encoding: from the keyframe at or before START, with an edit list so "
        "players begin at START, across clips; gaps are closed up and listed. Times: ISO "
        "8601 (without a zone: local time) or epoch seconds.",
        parents=list(parents),
    )
    parser.add_argument("flow", help="the flow's name")
    parser.add_argument("node", help="the recorder node's id")
    parser.add_argument("--start", required=True, metavar="T", help="where the export begins")
    parser.add_argument("--end", required=True, metavar="T", help="where it ends (excluded)")
    parser.add_argument("-o", "--output", required=True, type=Path, metavar="FILE")
    add_data_option(parser)


def parse_time(text: str) -> float:
    """Epoch seconds of ``text``: a number, or ISO 8601 (local time without a zone).
    Raises :class:`BadInput`."""
    try:
        return times.parse_time(text, naive_zone=None)
    except times.TimeError as exc:
        raise BadInput(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    """Export; returns the exit code. Blocks for the export."""
    enabled = not args.quiet and (args.verbose > 0 or is_terminal(sys.stderr))
    progress = ProgressLine(sys.stderr, describe_progress, enabled=enabled)
    try:
        result = export(args, progress)
    except (BadInput, ExportError, ConfigError) as exc:
        print(f"mediaflow: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error, av.error.FFmpegError) as exc:
        print(f"mediaflow: export failed: {exc}", file=sys.stderr)
        return 1
    finally:
        progress.finish()
    print(describe(result))
    return 0


def export(
    args: argparse.Namespace, progress: ProgressLine[ExportProgress] | None = None
) -> ExportResult:
    """The command's work; raises :class:`BadInput` and the export's errors."""
    start, end = parse_time(args.start), parse_time(args.end)
    data_dir: Path = args.data or default_data_dir()
    if not (data_dir / FILE_NAME).is_file():
        # Not created here: a mistyped --data would otherwise "find" nothing recorded.
        raise BadInput(f"no recordings in {data_dir} (no {FILE_NAME})")
    if not args.output.parent.is_dir():
        raise BadInput(f"no directory {args.output.parent} to write {args.output.name} in")
    options = ExportOptions(max_span_s=env_float(MAX_SPAN_ENV, DEFAULT_MAX_SPAN_S, minimum=1.0))
    index = TimelineIndex.in_data_dir(data_dir)
    store = ArtifactStore(data_dir)
    try:
        recorders = index.recorders(args.flow)
        if not recorders:
            raise BadInput(f"flow {args.flow!r} recorded nothing in {data_dir}")
        if args.node not in recorders:
            known = ", ".join(sorted(recorders))
            raise BadInput(f"{args.flow!r} has no recorder {args.node!r} (recorders: {known})")
        return export_recording(
            index, store, args.flow, args.node, start, end, args.output,
            options=options, progress=progress,
        )  # fmt: skip
    finally:
        index.close()
        store.close()


def describe(result: ExportResult) -> str:
    """What ``mediaflow export`` prints: the file, then one line per gap."""
    clips = len(result.clips)
    lines = [
        f"wrote {result.path}: {result.duration:.3f} s from {iso(result.begins_at)}"
        f" to {iso(result.end)}, {clips} clip{'' if clips == 1 else 's'},"
        f" {result.size:,} bytes{'' if result.audio else ', no sound'}"
        f" (first keyframe at {iso(result.first_keyframe)})"
    ]
    for start, end in result.gaps:
        lines.append(f"  gap: {iso(start)} to {iso(end)} ({end - start:.3f} s, closed up)")
    if result.missing:
        lines.append(f"  {len(result.missing)} clip(s) in the range are no longer stored")
    return "\n".join(lines)


def describe_progress(progress: ExportProgress) -> str:
    """``mediaflow export: 50% (60 of 120 s, clip 3 of 12)``."""
    share = progress.done_s / progress.total_s if progress.total_s else 1.0
    return (
        f"mediaflow export: {share:.0%} ({progress.done_s:.0f} of {progress.total_s:.0f} s,"
        f" clip {progress.clips_done} of {progress.clips})"
    )
