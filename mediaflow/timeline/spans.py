"""A recorder's clips as one record in time: spans where there is video, gaps where not.

Pure: :func:`lay_out` takes the clips the index holds for a range, which of their
artifacts the store still has, and the time now, and answers the spans (runs of
clips that follow each other) and the gaps (no clip: the camera was off, the flow
disabled, the box rebooting; or ``evicted``: the clip was recorded and the disk
cap or retention took it). Clips whose ends meet within ``JOINT_S`` are one span:
a segment's ``captured_at`` carries capture jitter, not a hole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from mediaflow.timeline.index import RecordedClip
from mediaflow.timeline.times import iso

JOINT_S: Final = 0.25
GapReason = Literal["not recorded", "evicted"]


@dataclass(frozen=True)
class Span:
    start: float
    end: float
    clips: tuple[RecordedClip, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "start_iso": iso(self.start),
            "end_iso": iso(self.end),
            "clips": [
                {
                    "digest": clip.ref.digest,
                    "media_type": clip.ref.media_type,
                    "size": clip.ref.size,
                    "start": clip.start,
                    "end": clip.end,
                }
                for clip in self.clips
            ],
        }


@dataclass(frozen=True)
class Gap:
    start: float
    end: float
    reason: GapReason

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "start_iso": iso(self.start),
            "end_iso": iso(self.end),
            "reason": self.reason,
        }


@dataclass
class Layout:
    spans: list[Span] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)

    @property
    def recorded_s(self) -> float:
        return sum(span.end - span.start for span in self.spans)


def lay_out(
    clips: Sequence[RecordedClip],
    start: float,
    end: float,
    *,
    present: Callable[[RecordedClip], bool],
    now: float,
) -> Layout:
    """The spans and gaps of ``[start, min(end, now))`` (see the module doc). ``clips``
    are the recorder's clips overlapping the range, in any order; a span keeps its
    clips whole (it may begin before ``start`` or end after ``end``), a gap is
    clipped to the range."""
    stop = min(end, now)
    layout = Layout()
    run: list[RecordedClip] = []
    cursor = start  # the end of what is accounted for

    def close_run() -> None:
        if run:
            layout.spans.append(Span(run[0].start, run[-1].end, tuple(run)))
            run.clear()

    def add_gap(gap_start: float, gap_end: float, reason: GapReason) -> None:
        gap_start, gap_end = max(gap_start, start), min(gap_end, stop)
        if gap_end - gap_start <= JOINT_S:
            return
        last = layout.gaps[-1] if layout.gaps else None
        if last is not None and last.reason == reason and gap_start - last.end <= JOINT_S:
            layout.gaps[-1] = Gap(last.start, gap_end, reason)
        else:
            layout.gaps.append(Gap(gap_start, gap_end, reason))

    for clip in sorted(clips, key=lambda c: c.start):
        if clip.start - cursor > JOINT_S:
            close_run()
            add_gap(cursor, clip.start, "not recorded")
        if present(clip):
            run.append(clip)
        else:
            close_run()
            add_gap(clip.start, clip.end, "evicted")
        cursor = max(cursor, clip.end)
    close_run()
    if stop - cursor > JOINT_S:
        add_gap(cursor, stop, "not recorded")
    return layout
