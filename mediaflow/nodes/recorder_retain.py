"""Which segments a recorder keeps when it keeps only what events cover (``keep = "events"``).

Frigate calls it "retain by motion": a clip holds an event's time plus ``pre_s``
before its start and ``post_s`` after its end, taken from segments already
captured. Events arrive on their own input, later than the segments they are
about (a motion node needs a moment to be sure), so a segment no known event
wants is not dropped at once: it waits until no event still to come could want
it, that is until the newest video is more than ``pre_s + lag_s`` past its end,
where ``lag_s`` is how late an event may arrive after its start.

Pure: :class:`EventWindows` keeps the known events' windows and answers
:meth:`EventWindows.decide` for a segment's span, given the newest video time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Verdict(enum.Enum):
    KEEP = "keep"  # an event's window covers it
    DROP = "drop"  # no event wants it, nor can one still to come
    WAIT = "wait"  # an event still to come might want it


@dataclass(frozen=True)
class Window:
    """One event's ``[start - pre_s, end + post_s)``; ``end`` None while it lasts."""

    start: float
    end: float | None

    def overlaps(self, begin: float, stop: float) -> bool:
        return begin < (float("inf") if self.end is None else self.end) and stop > self.start


@dataclass
class EventWindows:
    """The windows of the events seen (see the module doc)."""

    pre_s: float
    post_s: float
    lag_s: float
    # (type, source, zone, start) -> window: an event's end replaces its start's window
    windows: dict[tuple[str, str, str | None, float], Window] = field(default_factory=dict)

    def note(self, key: tuple[str, str, str | None], start: float, end: float | None) -> None:
        """An event started (``end`` None) or ended."""
        stop = None if end is None else end + self.post_s
        self.windows[(*key, start)] = Window(start - self.pre_s, stop)

    def decide(self, begin: float, stop: float, newest: float) -> Verdict:
        """Whether the segment ``[begin, stop)`` is kept, dropped or waits, with the
        newest video at ``newest`` (all on the capture clock)."""
        if any(window.overlaps(begin, stop) for window in self.windows.values()):
            return Verdict.KEEP
        if newest - stop > self.pre_s + self.lag_s:
            return Verdict.DROP
        return Verdict.WAIT

    def all_end_by(self, moment: float) -> bool:
        """Whether every known window has ended by ``moment``: a clip reaching it holds
        all they want, and can be finished without waiting for what comes next."""
        return all(w.end is not None and w.end <= moment for w in self.windows.values())

    def forget_before(self, moment: float) -> None:
        """Forget the windows that ended before ``moment`` (no segment left can want them)."""
        self.windows = {
            key: window
            for key, window in self.windows.items()
            if window.end is None or window.end >= moment
        }
