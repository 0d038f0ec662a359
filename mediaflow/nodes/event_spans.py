"""When a stretch of samples is an event: the start/end rules of the motion and
loudness nodes. Pure: a state and a sample in, a state and what happened out.

A sample covers ``[at, until]`` on the wall clock (a camera frame: one instant,
``until == at``; an audio chunk: its length) and is *active* or quiet (motion in a
zone, a chunk above the threshold), with a score (the changed fraction, the level).

- An active sample after quiet ones opens a *pending* span at its ``at``.
- A pending span that stays active until it is ``min_length_s`` long (from its first
  active sample's ``at`` to its last one's ``until``) has *started*
  (:class:`SpanStarted`); the first quiet sample before that drops it
  (:class:`SpanDropped`), so a blip shorter than ``min_length_s`` is no event.
- A started span *ends* (:class:`SpanEnded`) at its last active sample's ``until``
  once a sample comes ``cooldown_s`` or more after that without activity in between:
  a quiet sample that late, or an active one after a hole in the input that long (it
  then opens the next span).

A span keeps its peak score and the payload of the sample that set it (the frame
with the most motion), the first one on a tie.

:class:`Captured` reads what a sample needs from a frame's or chunk's meta.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

P = TypeVar("P")


@dataclass(frozen=True)
class SpanRules:
    """``min_length_s`` (>= 0): how long activity lasts before it is an event;
    ``cooldown_s`` (> 0): how long a quiet time ends one. ``ValueError`` otherwise."""

    min_length_s: float
    cooldown_s: float

    def __post_init__(self) -> None:
        check_seconds("min_length_s", self.min_length_s, zero=True)
        check_seconds("cooldown_s", self.cooldown_s, zero=False)


def check_seconds(name: str, value: object, *, zero: bool) -> float:
    """``value`` as a finite number of seconds, positive (or 0 with ``zero``);
    ``ValueError`` naming the option otherwise."""
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > 0 or (zero and value == 0))
    ):
        return float(value)
    least = ">= 0" if zero else "> 0"
    raise ValueError(f"{name} must be a number of seconds {least}, got {value!r}")


@dataclass(frozen=True)
class Sample(Generic[P]):
    """One frame's or chunk's verdict (see the module doc)."""

    at: float
    until: float
    active: bool
    score: float = 0.0
    payload: P | None = None


@dataclass(frozen=True)
class Span(Generic[P]):
    """A stretch of activity: from ``start`` to ``last`` (its last active sample's
    ``until``), its ``peak`` score and the ``best`` payload; ``started`` once it is
    an event."""

    start: float
    last: float
    peak: float
    best: P | None
    started: bool = False

    def taking(self, sample: Sample[P]) -> Span[P]:
        """This span, lengthened by the active ``sample``."""
        better = sample.score > self.peak
        return replace(
            self,
            last=max(self.last, sample.until),
            peak=sample.score if better else self.peak,
            best=sample.payload if better else self.best,
        )


@dataclass(frozen=True)
class SpanStarted(Generic[P]):
    span: Span[P]


@dataclass(frozen=True)
class SpanEnded(Generic[P]):
    span: Span[P]


@dataclass(frozen=True)
class SpanDropped(Generic[P]):
    """A pending span that never reached ``min_length_s``: no event."""

    span: Span[P]


SpanChange = SpanStarted[P] | SpanEnded[P] | SpanDropped[P]


def advance(
    span: Span[P] | None, sample: Sample[P], rules: SpanRules
) -> tuple[Span[P] | None, list[SpanChange[P]]]:
    """The span after ``sample`` (None: quiet), and what started, ended or was dropped."""
    changes: list[SpanChange[P]] = []
    if span is not None and sample.at - span.last >= rules.cooldown_s:
        # Quiet (or a hole in the input) for the whole cool-down since its last activity.
        changes.append(SpanEnded(span) if span.started else SpanDropped(span))
        span = None
    if not sample.active:
        if span is not None and not span.started:
            return None, [*changes, SpanDropped(span)]
        return span, changes
    if span is None:
        span = Span(sample.at, sample.until, sample.score, sample.payload)
    else:
        span = span.taking(sample)
    if not span.started and span.last - span.start >= rules.min_length_s:
        span = replace(span, started=True)
        changes.append(SpanStarted(span))
    return span, changes


@dataclass(frozen=True)
class Captured:
    """When and by what a frame or chunk was captured, from its meta: ``captured_at``
    (None when missing), ``seq`` and ``source`` (None when missing or mistyped)."""

    at: float | None
    seq: int | None
    source: str | None

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> Captured:
        at, seq, source = meta.get("captured_at"), meta.get("seq"), meta.get("source")
        return cls(
            float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None,
            seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
            source if isinstance(source, str) and source else None,
        )

    def is_after(self, last_seq: int | None) -> bool:
        """False for a redelivery of an item already taken (its ``seq`` was seen)."""
        return self.seq is None or last_seq is None or self.seq > last_seq
