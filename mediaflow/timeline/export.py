"""Exporting a recorded range as one seekable MP4, without re-encoding.

:func:`export_recording` reads a recorder's clips from the timeline index and the
store; :func:`export_clips` takes the clips and their files. Both plan with
:func:`mediaflow.timeline.cut.plan_export` (pure), then copy packets with PyAV:

- video packets are copied from the keyframe at or before ``start``; their times are
  shifted so ``start`` is 0, which makes the pre-roll's negative, and FFmpeg's MP4
  muxer then writes an edit list (``elst``) that starts presentation at ``start``:
  players decode the pre-roll and show the first frame at or after ``start``;
- sound (AAC, copied) from the packet holding ``start`` (and one before it, which
  the decoder needs to warm up), shifted by the same amount, so it stays where the
  clip had it against the picture: its own edit list trims it to ``start`` too;
- later clips follow whole from their first keyframe; gaps are closed up and
  reported (:mod:`mediaflow.timeline.cut`); video packets at or after ``end`` are
  left out;
- the file is a plain MP4 with its index up front (``+faststart``), written beside
  ``out`` and renamed into place, so ``out`` is whole or absent.

Everything here blocks (file I/O, demuxing): call it from a worker thread. Raises
the :class:`~mediaflow.timeline.cut.ExportError` family for what the range or the
clips do not allow, ``OSError`` and ``av.error.FFmpegError`` for the files.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import av

from mediaflow.timeline.cut import (
    DEFAULT_MAX_SPAN_S,
    JOIN_TOLERANCE_S,
    ClipFile,
    ExportPlan,
    NothingRecorded,
    check_range,
    plan_export,
)
from mediaflow.timeline.export_copy import CopyState, copy_piece, open_streams
from mediaflow.timeline.index import RecordedClip, TimelineIndex
from mediaflow.timeline.times import iso

log = logging.getLogger("mediaflow.timeline.export")

MAX_SPAN_ENV = "MEDIAFLOW_EXPORT_MAX_S"


@dataclass(frozen=True)
class ExportOptions:
    """``max_span_s``: the longest range exported at once (24 h; the commands read
    ``MEDIAFLOW_EXPORT_MAX_S``, :data:`MAX_SPAN_ENV`); ``join_tolerance_s``: how far
    apart two clips may meet without a gap."""

    max_span_s: float = DEFAULT_MAX_SPAN_S
    join_tolerance_s: float = JOIN_TOLERANCE_S


@dataclass(frozen=True)
class ExportProgress:
    """How far an export is: ``done_s`` of ``total_s`` seconds of output written."""

    done_s: float
    total_s: float
    clips_done: int
    clips: int


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_clips` wrote.

    ``begins_at``: the wall-clock time of output time 0, the first frame shown (at
    ``start``, or within a frame after it; or the first recorded moment after
    ``start``); ``first_keyframe``: where the copied video really
    begins (the pre-roll, hidden by the edit list); ``duration``: the output's length;
    ``gaps``: wall-clock spans inside the range no clip covers, closed up in the
    output; ``missing``: clips of the range whose bytes are gone (evicted), part of
    the gaps.
    """

    path: Path
    start: float
    end: float
    begins_at: float
    first_keyframe: float
    duration: float
    gaps: tuple[tuple[float, float], ...]
    clips: tuple[RecordedClip, ...]
    missing: tuple[RecordedClip, ...] = ()
    size: int = 0
    video_packets: int = 0
    audio_packets: int = 0
    audio: bool = False

    def to_json(self) -> dict[str, Any]:
        """Times as epoch seconds and ISO 8601; what a server can put in a header."""
        return {
            "start": self.start,
            "end": self.end,
            "begins_at": self.begins_at,
            "first_keyframe": self.first_keyframe,
            "duration": round(self.duration, 6),
            "gaps": [{"start": a, "end": b, "from": iso(a), "to": iso(b)} for a, b in self.gaps],
            "clips": [clip.ref.digest for clip in self.clips],
            "missing": [clip.ref.digest for clip in self.missing],
            "size": self.size,
            "audio": self.audio,
        }


class ClipPaths(Protocol):
    """What export needs of a store: where a digest's bytes are (``ArtifactStore``)."""

    def path_for(self, digest: str) -> Path: ...


Progress = Callable[[ExportProgress], None]


def export_recording(
    index: TimelineIndex,
    store: ClipPaths,
    flow: str,
    node: str,
    start: float,
    end: float,
    out: Path,
    *,
    options: ExportOptions | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    """Write recorder ``node`` of ``flow``'s ``[start, end)`` (epoch seconds) to ``out``.

    Blocks; raises as :func:`export_clips` does, and :class:`NothingRecorded` when the
    index has no clip there or every clip's bytes are gone.
    """
    options = options or ExportOptions()
    check_range(start, end, options.max_span_s)  # before the index is read
    clips = index.clips(flow, node, start, end)
    present: list[ClipFile] = []
    missing: list[RecordedClip] = []
    for clip in clips:
        path = store.path_for(clip.ref.digest)
        if path.is_file():
            present.append(ClipFile(clip, path))
        else:
            missing.append(clip)
    if not clips:
        raise NothingRecorded(f"{flow}/{node} recorded nothing between {iso(start)} and {iso(end)}")
    if not present:
        raise NothingRecorded(
            f"the {len(missing)} clip(s) of {flow}/{node} between {iso(start)} and"
            f" {iso(end)} are no longer stored (evicted)"
        )
    result = export_clips(present, start, end, out, options=options, progress=progress)
    return replace(result, missing=tuple(missing)) if missing else result


def export_clips(
    clips: Sequence[ClipFile],
    start: float,
    end: float,
    out: Path,
    *,
    options: ExportOptions | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    """Write ``[start, end)`` of ``clips`` (one recorder's) to ``out`` as one MP4.

    Blocks. Raises :class:`~mediaflow.timeline.cut.BadRange`, ``RangeTooLong``,
    ``NothingRecorded``, ``CannotExport`` (WebM, a format change, mismatched tracks),
    ``OSError``, ``av.error.FFmpegError``; ``out`` is then left as it was.
    """
    options = options or ExportOptions()
    plan = plan_export(
        clips,
        start,
        end,
        max_span_s=options.max_span_s,
        join_tolerance_s=options.join_tolerance_s,
    )
    part = out.with_name(f".{out.name}.part")
    try:
        state = _write(plan, part, progress)
        os.replace(part, out)
    finally:
        part.unlink(missing_ok=True)
    begins = plan.pieces[0].wall_in + float(state.lead)
    first_keyframe = begins if state.first_keyframe is None else state.first_keyframe
    return ExportResult(
        path=out,
        start=start,
        end=end,
        begins_at=begins,
        first_keyframe=first_keyframe,
        duration=plan.duration - float(state.lead),
        gaps=plan.gaps,
        clips=plan.clips,
        size=out.stat().st_size,
        video_packets=state.video_packets,
        audio_packets=state.audio_packets,
        audio=state.audio_stream is not None,
    )


def _write(plan: ExportPlan, part: Path, progress: Progress | None) -> CopyState:
    # The index up front: players read it before the first byte of media.
    with av.open(str(part), "w", format="mp4", options={"movflags": "+faststart"}) as output:
        state = open_streams(output, [piece.source for piece in plan.pieces])
        for number, piece in enumerate(plan.pieces, 1):
            log.debug(
                "piece %d/%d: %s from %.3f s to %.3f s at %.3f s",
                number, len(plan.pieces), piece.source.path.name,
                piece.local_in, piece.local_out, piece.at,
            )  # fmt: skip
            copy_piece(output, state, piece)
            if progress is not None:
                done = piece.at + piece.length
                progress(ExportProgress(done, plan.duration, number, len(plan.pieces)))
    return state
