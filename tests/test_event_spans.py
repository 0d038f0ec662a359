"""The start/end rules of the motion and loudness nodes (mediaflow.nodes.event_spans),
as tables: samples in, what started, ended or was dropped out."""

from __future__ import annotations

import pytest

from mediaflow.nodes.event_spans import (
    Sample,
    Span,
    SpanChange,
    SpanDropped,
    SpanEnded,
    SpanRules,
    SpanStarted,
    advance,
)

RULES = SpanRules(min_length_s=0.5, cooldown_s=2.0)


def frames(pattern: str, fps: float = 10.0, start: float = 0.0) -> list[Sample[int]]:
    """One frame per character: ``#`` moving (score 1, or a digit's value), ``.`` quiet;
    each frame's payload is its index."""
    out = []
    for index, char in enumerate(pattern):
        at = start + index / fps
        active = char != "."
        score = float(char) if char.isdigit() else (1.0 if active else 0.0)
        out.append(Sample(at, at, active, score, index))
    return out


def run(
    samples: list[Sample[int]], rules: SpanRules = RULES
) -> tuple[Span[int] | None, list[tuple[str, float, float, float, int | None]]]:
    """Every change as ``(kind, start, last, peak, best)`` and the span left."""
    span: Span[int] | None = None
    seen: list[tuple[str, float, float, float, int | None]] = []
    for sample in samples:
        span, changes = advance(span, sample, rules)
        seen += [_row(change) for change in changes]
    return span, seen


def _row(change: SpanChange[int]) -> tuple[str, float, float, float, int | None]:
    kind = {SpanStarted: "started", SpanEnded: "ended", SpanDropped: "dropped"}[type(change)]
    span = change.span
    return kind, round(span.start, 6), round(span.last, 6), span.peak, span.best


def test_quiet_frames_are_no_event() -> None:
    assert run(frames("." * 50)) == (None, [])


def test_motion_starts_once_it_lasted_min_length_and_ends_after_the_cooldown() -> None:
    # Moving from 1.0 to 2.0 s; quiet after. Started at 1.5 s (0.5 s long), ended by
    # the frame 2 s after the last moving one, at that last frame's time.
    span, seen = run(frames("." * 10 + "#" * 11 + "." * 25))
    assert span is None
    assert seen == [("started", 1.0, 1.5, 1.0, 10), ("ended", 1.0, 2.0, 1.0, 10)]


def test_a_blip_shorter_than_min_length_is_dropped() -> None:
    assert run(frames("." * 5 + "####" + "." * 30))[1] == [("dropped", 0.5, 0.8, 1.0, 5)]


def test_min_length_zero_starts_on_the_first_moving_frame() -> None:
    rules = SpanRules(min_length_s=0, cooldown_s=0.25)
    seen = run(frames("..#....#", fps=10), rules)[1]
    assert seen == [
        ("started", 0.2, 0.2, 1.0, 2),
        ("ended", 0.2, 0.2, 1.0, 2),
        ("started", 0.7, 0.7, 1.0, 7),
    ]


def test_a_quiet_gap_shorter_than_the_cooldown_keeps_one_event() -> None:
    seen = run(frames("#" * 10 + "." * 15 + "#" * 10 + "." * 25))[1]
    assert seen == [("started", 0.0, 0.5, 1.0, 0), ("ended", 0.0, 3.4, 1.0, 0)]


def test_the_peak_and_its_payload_are_the_first_highest_score() -> None:
    seen = run(frames("1113952591" + "." * 21))[1]
    assert seen[-1] == ("ended", 0.0, 0.9, 9.0, 4)


def test_a_hole_in_the_input_as_long_as_the_cooldown_ends_the_event() -> None:
    """An active frame after a hole ends the event at its last frame and opens the next."""
    before = frames("#" * 10)
    after = frames("#" * 10, start=5.0)
    span, seen = run(before + after)
    assert seen == [
        ("started", 0.0, 0.5, 1.0, 0),
        ("ended", 0.0, 0.9, 1.0, 0),
        ("started", 5.0, 5.5, 1.0, 0),
    ]
    assert span is not None and span.started and span.last == pytest.approx(5.9)


def test_chunks_count_their_length() -> None:
    """Audio chunks cover [at, until]: two 0.1 s chunks make 0.2 s; the end is the
    last loud chunk's end."""
    rules = SpanRules(min_length_s=0.2, cooldown_s=1.0)
    levels = [-60, -10, -12, -60] + [-60] * 10
    samples: list[Sample[int]] = [
        Sample(i / 10, i / 10 + 0.1, level >= -30, level) for i, level in enumerate(levels)
    ]
    assert run(samples, rules)[1] == [
        ("started", 0.1, 0.3, -10, None),
        ("ended", 0.1, 0.3, -10, None),
    ]


def test_one_loud_chunk_is_shorter_than_min_length() -> None:
    rules = SpanRules(min_length_s=0.2, cooldown_s=1.0)
    samples: list[Sample[int]] = [Sample(0.0, 0.1, True, -5), Sample(0.1, 0.2, False, -80)]
    assert run(samples, rules)[1] == [("dropped", 0.0, 0.1, -5, None)]


@pytest.mark.parametrize(
    ("min_length_s", "cooldown_s"),
    [(-0.1, 1.0), (0.5, 0), (0.5, -1), (float("nan"), 1.0), (0.5, float("inf")), (True, 1.0)],
)
def test_rules_refuse_what_is_not_a_length(min_length_s: float, cooldown_s: float) -> None:
    with pytest.raises(ValueError, match="must be a number of seconds"):
        SpanRules(min_length_s, cooldown_s)
