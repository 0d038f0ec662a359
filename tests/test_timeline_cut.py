"""Planning an export (mediaflow.timeline.cut), pure: which clips, where, which gaps."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mediaflow.media import MediaRef
from mediaflow.timeline import (
    BadRange,
    CannotExport,
    ClipFile,
    NothingRecorded,
    RangeTooLong,
    RecordedClip,
)
from mediaflow.timeline.cut import plan_export

T = 1_800_000_000.0


def clip(start: float, end: float, *, media_type: str = "video/mp4", width: int = 320) -> ClipFile:
    digest = "sha256:" + hashlib.sha256(f"{start}-{end}".encode()).hexdigest()
    meta = {"video_codec": "h264", "width": width, "height": 240}
    ref = MediaRef(digest, media_type, 1, meta)
    return ClipFile(RecordedClip("f", "rec", T + start, T + end, ref), Path(f"/clips/{start}"))


def layout(clips: list[ClipFile], start: float, end: float) -> list[tuple[float, float, float]]:
    """``(local_in, local_out, at)`` of each piece."""
    plan = plan_export(clips, T + start, T + end)
    return [(round(p.local_in, 6), round(p.local_out, 6), round(p.at, 6)) for p in plan.pieces]


def gaps(clips: list[ClipFile], start: float, end: float) -> list[tuple[float, float]]:
    plan = plan_export(clips, T + start, T + end)
    return [(round(a - T, 6), round(b - T, 6)) for a, b in plan.gaps]


SEAMED = [clip(0, 6), clip(6.02, 12.02), clip(11.99, 17.99)]  # a capture clock's jitter


@pytest.mark.parametrize(
    ("clips", "start", "end", "pieces", "holes"),
    [
        # mid-clip to mid-clip across two seams: the later clips follow whole, at once
        (SEAMED, 4.5, 14.0, [(4.5, 6, 0), (0, 6, 1.5), (0, 2.01, 7.5)], []),
        # one clip, inside it
        ([clip(0, 6)], 1, 2, [(1, 2, 0)], []),
        # a missing clip in the middle: closed up, reported
        ([clip(0, 6), clip(12, 18)], 3, 15, [(3, 6, 0), (0, 3, 3)], [(6, 12)]),
        # the range begins before the recording and ends after it
        ([clip(10, 16)], 5, 20, [(0, 6, 0)], [(5, 10), (16, 20)]),
        # a later clip overlapping what is covered by more than a seam: from the cover
        ([clip(0, 6), clip(4, 10)], 0, 10, [(0, 6, 0), (2, 6, 6)], []),
        # a clip wholly inside what is covered adds nothing
        ([clip(0, 6), clip(1, 5), clip(6, 12)], 0, 12, [(0, 6, 0), (0, 6, 6)], []),
    ],
)
def test_pieces_and_gaps(
    clips: list[ClipFile],
    start: float,
    end: float,
    pieces: list[tuple[float, float, float]],
    holes: list[tuple[float, float]],
) -> None:
    assert layout(clips, start, end) == pieces
    assert gaps(clips, start, end) == holes


def test_only_the_first_piece_starts_mid_clip_and_lengths_add_up() -> None:
    plan = plan_export(SEAMED, T + 4.5, T + 14.0)
    assert [p.first for p in plan.pieces] == [True, False, False]
    assert plan.duration == pytest.approx(1.5 + 6 + 2.01)
    assert plan.pieces[1].shift == pytest.approx(1.5)  # output = clip time + shift


@pytest.mark.parametrize(
    ("clips", "start", "end", "error", "words"),
    [
        ([], 0, 10, NothingRecorded, "nothing recorded between"),
        ([clip(0, 6)], 5, 5, BadRange, "is not before"),
        ([clip(0, 6)], 6, 1, BadRange, "is not before"),
        ([clip(0, 6)], float("nan"), 1, BadRange, "finite"),
        ([clip(0, 6)], 0, 90_000, RangeTooLong, "at most 86,400 s"),
        ([clip(0, 6, media_type="video/webm")], 0, 6, CannotExport, 'codec = "h264"'),
        ([clip(0, 6), clip(6, 12, width=640)], 0, 12, CannotExport, "h264 320x240 to h264 640x240"),
    ],
)
def test_what_is_refused(
    clips: list[ClipFile], start: float, end: float, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        plan_export(clips, T + start, T + end)


def test_the_cap_is_an_option() -> None:
    with pytest.raises(RangeTooLong):
        plan_export([clip(0, 6)], T, T + 61, max_span_s=60)
    assert plan_export([clip(0, 6)], T, T + 60, max_span_s=60).duration == 6
