"""The timeline's pure parts and its index: times as people write them, spans and gaps,
and clips and events noted, replaced on a redelivery and found by range."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mediaflow.media import MediaRef
from mediaflow.timeline import EventError, RecordedClip, TimelineEvent, TimelineIndex
from mediaflow.timeline.spans import JOINT_S, Gap, lay_out
from mediaflow.timeline.times import TimeError, iso, parse_time

T0 = 1_796_652_120.0  # 2026-12-07T14:02:00Z


def ref(n: int) -> MediaRef:
    return MediaRef(f"sha256:{n:064x}", "video/mp4", 1000 + n, {"seq": n})


def clip(n: int, start: float, end: float, node: str = "rec") -> RecordedClip:
    return RecordedClip("door", node, start, end, ref(n), ("cam", "mic"))


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("2026-12-07T14:02:00Z", T0),
        ("2026-12-07T15:02:00+01:00", T0),
        ("2026-12-07 14:02", T0),  # no zone: UTC for the API
        ("1796652120", T0),
        ("1796652120.25", T0 + 0.25),
    ],
)
def test_times_are_read_as_iso_8601_or_epoch_seconds(raw: str, seconds: float) -> None:
    assert parse_time(raw) == seconds


@pytest.mark.parametrize(
    "raw", ["", "yesterday", "nan", "inf", "-5", "1e300", "0001-01-01T00:00+14:00"]
)
def test_times_that_are_not_times_are_refused_by_name(raw: str) -> None:
    with pytest.raises(TimeError, match="time"):
        parse_time(raw)


def test_iso_writes_utc_to_the_millisecond() -> None:
    assert iso(T0 + 0.5) == "2026-12-07T14:02:00.500Z"


def test_contiguous_clips_are_one_span_and_holes_are_gaps() -> None:
    clips = [clip(1, T0, T0 + 10), clip(2, T0 + 10.1, T0 + 20), clip(3, T0 + 30, T0 + 40)]
    layout = lay_out(clips, T0 - 5, T0 + 50, present=lambda c: True, now=T0 + 45)
    assert [(s.start, s.end, len(s.clips)) for s in layout.spans] == [
        (T0, T0 + 20, 2),
        (T0 + 30, T0 + 40, 1),
    ]
    # The range before the first clip, the hole, and up to now (not the future).
    assert layout.gaps == [
        Gap(T0 - 5, T0, "not recorded"),
        Gap(T0 + 20, T0 + 30, "not recorded"),
        Gap(T0 + 40, T0 + 45, "not recorded"),
    ]
    assert layout.recorded_s == pytest.approx(30)


def test_an_evicted_clip_is_a_gap_of_its_own_and_splits_the_span() -> None:
    clips = [clip(n, T0 + 10 * n, T0 + 10 * (n + 1)) for n in range(5)]
    gone = {ref(1).digest, ref(2).digest}
    layout = lay_out(clips, T0, T0 + 50, present=lambda c: c.ref.digest not in gone, now=T0 + 99)
    assert [(s.start, s.end) for s in layout.spans] == [(T0, T0 + 10), (T0 + 30, T0 + 50)]
    assert layout.gaps == [Gap(T0 + 10, T0 + 30, "evicted")]


def test_capture_jitter_is_not_a_gap() -> None:
    clips = [clip(1, T0, T0 + 10), clip(2, T0 + 10 + JOINT_S / 2, T0 + 20)]
    layout = lay_out(clips, T0, T0 + 20, present=lambda c: True, now=T0 + 20)
    assert len(layout.spans) == 1 and layout.gaps == []


def test_nothing_recorded_is_one_gap() -> None:
    layout = lay_out([], T0, T0 + 60, present=lambda c: True, now=T0 + 600)
    assert layout.spans == [] and layout.gaps == [Gap(T0, T0 + 60, "not recorded")]


def test_events_refuse_what_is_not_an_event() -> None:
    with pytest.raises(EventError):
        TimelineEvent("motion", "cam", T0, T0 - 1)
    with pytest.raises(EventError):
        TimelineEvent("motion", "cam", T0, score=math.nan)
    with pytest.raises(EventError):
        TimelineEvent.from_json({"type": "motion"})
    event = TimelineEvent("motion", "cam", T0, score=0.2, zone="door", snapshot=ref(7))
    assert TimelineEvent.from_json(event.to_json()) == event
    ended = event.ended(T0 + 3, score=0.5)
    assert ended.to_json()["phase"] == "end" and ended.length == 3 and ended.score == 0.5


def test_the_index_finds_clips_and_events_by_range(tmp_path: Path) -> None:
    index = TimelineIndex.in_data_dir(tmp_path)
    try:
        for n in range(6):
            index.note_clip(clip(n, T0 + 10 * n, T0 + 10 * (n + 1)))
        index.note_clip(clip(1, T0 + 10, T0 + 20))  # a redelivery: the same row
        index.note_clip(clip(9, T0, T0 + 10, node="other"))
        found = index.clips("door", "rec", T0 + 15, T0 + 35)
        assert [c.ref for c in found] == [ref(1), ref(2), ref(3)]
        assert found[0] == clip(1, T0 + 10, T0 + 20)
        assert index.recorders("door") == ["other", "rec"] or set(index.recorders("door")) == {
            "rec",
            "other",
        }

        started = TimelineEvent("motion", "cam", T0 + 12, score=0.1, snapshot=ref(8))
        index.note_event("door", "motion", started)
        index.note_event("door", "motion", started.ended(T0 + 14, score=0.3))  # same row, ended
        index.note_event("door", "loud", TimelineEvent("loudness", "mic", T0 + 40))  # still going
        index.note_event("door", "loud", TimelineEvent("loudness", "mic2", T0 + 5, T0 + 6))
        every = index.events("door", T0, T0 + 60)
        assert [(e.node, e.event.type, e.event.end) for e in every] == [
            ("loud", "loudness", T0 + 6),
            ("motion", "motion", T0 + 14),
            ("loud", "loudness", None),
        ]
        assert [e.event.start for e in index.events("door", T0 + 13, T0 + 20)] == [T0 + 12]
        assert [e.event.source for e in index.events("door", T0 + 41, T0 + 42)] == ["mic"]
        assert [e.event.type for e in index.events("door", T0, T0 + 60, sources=["cam"])] == [
            "motion"
        ]
        assert [
            e.event.source for e in index.events("door", T0, T0 + 60, types=["loudness"], limit=1)
        ] == ["mic2"]
        assert index.holds("door", ref(3).digest) and index.holds("door", ref(8).digest)
        assert not index.holds("elsewhere", ref(3).digest)
    finally:
        index.close()


def test_zones_starting_on_one_frame_are_two_events(tmp_path: Path) -> None:
    index = TimelineIndex.in_data_dir(tmp_path)
    try:
        for zone in ("door", "gate", None):
            index.note_event("door", "motion", TimelineEvent("motion", "cam", T0, zone=zone))
        found = index.events("door", T0 - 1, T0 + 1)
        assert sorted(str(n.event.zone) for n in found) == ["None", "door", "gate"]
    finally:
        index.close()
