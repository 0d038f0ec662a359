"""Timeline events: something worth looking at, on the wall clock.

An event has a type (``motion``, ``loudness``, ``transcript``, ``device_lost`` ...),
the capturing node it is about (``source``: a camera or a microphone, so a
recorder's timeline finds the events of what it records), a start, an end (None
while it lasts), a score and an optional snapshot (a JPEG reference). Times are
``captured_at`` seconds since the epoch, the clock recordings are laid out on.

A node that detects events emits each as plain JSON on its ``event`` port
(:meth:`TimelineEvent.to_json`, with ``phase`` ``"start"`` or ``"end"``) and
notes it in the timeline index with ``ctx.more.note_event(event)``: once when it
starts, again when it ends. Both are keyed by (flow, node, type, source, zone,
start), so a redelivered item notes the same event again rather than a second one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from mediaflow.media import MediaRef

Phase = Literal["start", "end"]


class EventError(ValueError):
    """An event's fields do not make an event (a negative length, a NaN score ...)."""


@dataclass(frozen=True)
class TimelineEvent:
    """One event (see the module doc)."""

    type: str
    source: str
    start: float
    end: float | None = None
    score: float = 0.0
    snapshot: MediaRef | None = None
    zone: str | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if not self.type or not self.source:
            raise EventError("an event needs a type and a source")
        numbers = [self.start, self.score] + ([] if self.end is None else [self.end])
        if not all(math.isfinite(value) for value in numbers):
            raise EventError(f"an event's times and score must be finite: {self!r}")
        if self.end is not None and self.end < self.start:
            raise EventError(f"event ends ({self.end}) before it starts ({self.start})")

    @property
    def phase(self) -> Phase:
        return "start" if self.end is None else "end"

    @property
    def length(self) -> float | None:
        return None if self.end is None else self.end - self.start

    def ended(
        self, end: float, *, score: float | None = None, snapshot: MediaRef | None = None
    ) -> TimelineEvent:
        """This event, ended at ``end`` (with the best score and snapshot it had)."""
        return replace(
            self,
            end=end,
            score=self.score if score is None else score,
            snapshot=self.snapshot if snapshot is None else snapshot,
        )

    def to_json(self) -> dict[str, Any]:
        """The value emitted on an ``event`` port, and answered by the API."""
        return {
            "type": self.type,
            "phase": self.phase,
            "source": self.source,
            "start": self.start,
            "end": self.end,
            "length": self.length,
            "score": self.score,
            "zone": self.zone,
            "text": self.text,
            "snapshot": None if self.snapshot is None else self.snapshot.to_json(),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> TimelineEvent:
        """The event :meth:`to_json` gave; :class:`EventError` for anything else."""
        try:
            snapshot = value.get("snapshot")
            end = value.get("end")
            return cls(
                type=str(value["type"]),
                source=str(value["source"]),
                start=float(value["start"]),
                end=None if end is None else float(end),
                score=float(value.get("score", 0.0)),
                snapshot=None if snapshot is None else MediaRef.from_json(snapshot),
                zone=value.get("zone"),
                text=value.get("text"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EventError(f"not an event: {exc}") from exc
