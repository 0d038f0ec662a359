"""Planning an export of a recorded range: which clips, where to cut, where the gaps are.

Pure: no I/O, no clock. :mod:`mediaflow.timeline.export` applies a plan with PyAV.

The output's timeline is the recorded parts of ``[start, end)`` laid end to end:
output time 0 is the first recorded moment at or after ``start``, and a gap (a
stretch no clip covers, longer than ``join_tolerance_s``) is *closed up*, not
filled: the picture after it follows the one before it at once, and the gap is
reported (wall clock) so a player or a header can say where time jumps. Closing up
keeps audio and video continuous (an MP4 audio track has no way to say "nothing
here"), and a night without recording does not become hours of a frozen picture.

Consecutive clips of one recorder meet within a frame or so (each clip's end is its
start plus its video's length; the next one's start is its first frame's capture
time): such a seam is not a gap, and the later clip follows at once, whole, from its
first keyframe. Only the first piece starts mid-clip; the writer begins it at the
keyframe at or before ``start`` and an edit list hides the frames before ``start``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mediaflow.timeline.index import RecordedClip
from mediaflow.timeline.times import iso

DEFAULT_MAX_SPAN_S: Final = 24 * 3600.0
# Seams between consecutive clips wobble by the capture clock's jitter (a few ms to a
# frame); anything wider is a hole in the recording, reported as a gap.
JOIN_TOLERANCE_S: Final = 0.1
EXPORTED_TYPES: Final = frozenset({"video/mp4"})


class ExportError(Exception):
    """An export that cannot be made; the message says why in one line."""


class BadRange(ExportError):
    """``start`` is not before ``end``, or either is not a finite time."""


class RangeTooLong(ExportError):
    """The range is longer than the configured cap (``max_span_s``)."""


class NothingRecorded(ExportError):
    """No clip (with its bytes still stored) overlaps the range."""


class CannotExport(ExportError):
    """The clips cannot become one MP4 without re-encoding (WebM, a format change)."""


@dataclass(frozen=True)
class ClipFile:
    """A clip of the timeline index and where its bytes are on this machine."""

    clip: RecordedClip
    path: Path


@dataclass(frozen=True)
class Piece:
    """The part ``[wall_in, wall_out)`` of one clip, shown from output time ``at``."""

    source: ClipFile
    wall_in: float
    wall_out: float
    at: float
    first: bool  # starts mid-clip from the keyframe at or before wall_in (pre-roll)

    @property
    def local_in(self) -> float:
        """Seconds into the clip where this piece is first shown."""
        return max(self.wall_in - self.source.clip.start, 0.0)

    @property
    def local_out(self) -> float:
        return self.wall_out - self.source.clip.start

    @property
    def shift(self) -> float:
        """Output time = clip time + shift."""
        return self.at - self.local_in

    @property
    def length(self) -> float:
        return self.wall_out - self.wall_in


@dataclass(frozen=True)
class ExportPlan:
    start: float
    end: float
    pieces: tuple[Piece, ...]
    gaps: tuple[tuple[float, float], ...]  # wall clock, inside [start, end), closed up

    @property
    def duration(self) -> float:
        """The output's length: the recorded parts of the range, end to end."""
        return sum(piece.length for piece in self.pieces)

    @property
    def clips(self) -> tuple[RecordedClip, ...]:
        return tuple(piece.source.clip for piece in self.pieces)


def check_range(start: float, end: float, max_span_s: float = DEFAULT_MAX_SPAN_S) -> None:
    """Raise :class:`BadRange` or :class:`RangeTooLong` for a range not worth looking up."""
    if not (math.isfinite(start) and math.isfinite(end)):
        raise BadRange("start and end must be finite times")
    if start >= end:
        raise BadRange(f"start {iso(start)} is not before end {iso(end)}")
    if end - start > max_span_s:
        raise RangeTooLong(
            f"the range is {end - start:,.0f} s long; at most {max_span_s:,.0f} s is exported"
            " at once (MEDIAFLOW_EXPORT_MAX_S)"
        )


def plan_export(
    clips: Sequence[ClipFile],
    start: float,
    end: float,
    *,
    max_span_s: float = DEFAULT_MAX_SPAN_S,
    join_tolerance_s: float = JOIN_TOLERANCE_S,
) -> ExportPlan:
    """The pieces of ``clips`` (one recorder's, with their bytes) that make ``[start, end)``.

    Raises :class:`BadRange`, :class:`RangeTooLong`, :class:`NothingRecorded` (no clip
    overlaps the range) or :class:`CannotExport` (WebM clips, or the codec or frame
    size changes inside the range).
    """
    check_range(start, end, max_span_s)
    ordered = sorted(clips, key=lambda c: (c.clip.start, c.clip.end))
    pieces: list[Piece] = []
    gaps: list[tuple[float, float]] = []
    cursor, at = start, 0.0  # wall clock covered so far; output time so far
    for source in ordered:
        clip = source.clip
        wall_out = min(clip.end, end)
        if pieces and clip.start >= cursor - join_tolerance_s:
            wall_in = clip.start  # a seam (or a hole): the clip follows whole
        else:
            wall_in = max(clip.start, cursor)  # the first, or one overlapping what is covered
        if wall_out - wall_in <= 1e-6:
            continue
        if wall_in - cursor > join_tolerance_s:
            gaps.append((cursor, wall_in))
        pieces.append(Piece(source, wall_in, wall_out, at, first=not pieces))
        at += wall_out - wall_in
        cursor = max(cursor, wall_out)
    if not pieces:
        raise NothingRecorded(f"nothing recorded between {iso(start)} and {iso(end)}")
    if end - cursor > join_tolerance_s:
        gaps.append((cursor, end))
    _check_formats(pieces)
    return ExportPlan(start, end, tuple(pieces), tuple(gaps))


def _check_formats(pieces: Sequence[Piece]) -> None:
    """One MP4 track takes one codec and one frame size: refuse anything else here,
    before a byte is written, naming where it changes."""
    first = pieces[0].source.clip
    if first.ref.media_type not in EXPORTED_TYPES:
        raise CannotExport(
            f"the range was recorded as {first.ref.media_type} (VP8/VP9 and Opus); only"
            ' H.264/H.265 recordings in MP4 are exported: record with codec = "h264"'
        )
    shape = _format_of(first)
    for piece in pieces[1:]:
        clip = piece.source.clip
        if clip.ref.media_type != first.ref.media_type or _format_of(clip) != shape:
            raise CannotExport(
                f"the recording changes format at {iso(clip.start)}"
                f" ({_describe(shape)} to {_describe(_format_of(clip))}): export up to"
                " that time, and from it, separately"
            )


def _format_of(clip: RecordedClip) -> tuple[object, object, object]:
    meta = clip.ref.meta
    return (meta.get("video_codec"), meta.get("width"), meta.get("height"))


def _describe(shape: tuple[object, object, object]) -> str:
    codec, width, height = shape
    return f"{codec} {width}x{height}"
