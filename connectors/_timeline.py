"""Source time across reconnects and crash-resumes: epochs, gaps and per-port ``seq``.

A source's ``pts`` counts seconds since it started. Each opened input counts from its
own first item, so every (re)opened input begins an :class:`Epoch` that carries the
offset to add and, when something is missing before it, the gap. The first chunk a
port emits in an epoch with a gap says so in its meta (``discontinuity: true``,
``gap_s``); ``seq`` never skips: it numbers what was emitted, gap-free, per port,
and continues from ``ctx.more.latest(port)`` when a crashed run is resumed.

Everything here runs on the event loop and never blocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mediaflow import Context, MediaRef


@dataclass(frozen=True)
class Epoch:
    """A stretch of capture without a gap.

    ``offset`` turns an input's pts into source pts; ``gap_s`` is None when the epoch
    continues what came before, else the seconds missing before it.
    """

    index: int
    offset: float
    gap_s: float | None


@dataclass(frozen=True)
class Resume:
    """Where a crashed run of this source stopped, read from ``ctx.more.latest``."""

    seqs: Mapping[str, int]  # next seq per port
    gap_s: float  # wall-clock seconds since it was captured
    ends: Mapping[str, float] = field(default_factory=dict)  # pts just after, per port

    @property
    def pts_end(self) -> float:
        """Source pts just after the last thing emitted on any port."""
        return max(self.ends.values(), default=0.0)

    def resume_at(self, ports: Iterable[str]) -> float:
        """Where an input feeding ``ports`` can continue without losing anything: the
        earliest end among them (a port that lagged, such as a segment still being
        filled, would otherwise never emit what it had not). 0 for no ports."""
        return min((self.ends.get(port, 0.0) for port in ports), default=0.0)


def read_resume(ctx: Context, ports: Iterable[str], now: float | None = None) -> Resume | None:
    """The resume point when this run is a redelivery of the source item, else None.

    Ports whose latest value carries no usable meta start at seq 0.
    """
    if not ctx.redelivery:
        return None
    wall = time.time() if now is None else now
    seqs: dict[str, int] = {}
    ends: dict[str, float] = {}
    last_captured: float | None = None
    for port in ports:
        latest = ctx.more.latest(port)
        if not isinstance(latest, MediaRef):
            continue
        meta = latest.meta
        seq, pts = meta.get("seq"), meta.get("pts")
        if isinstance(seq, int):
            seqs[port] = seq + 1
        if isinstance(pts, int | float):
            duration = meta.get("duration")
            end = float(pts) + (float(duration) if isinstance(duration, int | float) else 0.0)
            ends[port] = end
        captured = meta.get("captured_at")
        if isinstance(captured, int | float):
            last_captured = max(last_captured or 0.0, float(captured))
    gap = max(0.0, wall - last_captured) if last_captured is not None else 0.0
    return Resume(seqs, gap, ends)


class Timeline:
    """Hands out an :class:`Epoch` for each opened input and tracks the source's end."""

    def __init__(
        self,
        resume: Resume | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        seeked_at: float | None = None,
    ) -> None:
        """``seeked_at``: the resumed run's first input was opened at this pts of its
        own timeline (a file continued where the crashed run stopped, see
        :meth:`Resume.resume_at`), so its pts already are source pts and nothing is
        missing before them."""
        self._clock = clock
        self._resume = resume
        self._seeked_at = seeked_at
        self._start: float | None = None
        self._next_index = 0
        self.end = 0.0  # source pts just after the newest item seen

    def begin(self) -> Epoch:
        """The epoch of an input whose first item just arrived."""
        now = self._clock()
        index = self._next_index
        self._next_index += 1
        if self._start is None:
            if self._resume is None:
                self._start = now
                return Epoch(index, 0.0, None)
            if self._seeked_at is not None:
                self._start = now - self._seeked_at
                self.end = self._seeked_at
                return Epoch(index, 0.0, None)
            offset = self._resume.pts_end + self._resume.gap_s
            self._start = now - offset
            self.end = offset
            return Epoch(index, offset, self._resume.gap_s)
        # A source that delivered faster than real time (a stream catching up) must not
        # be sent back in time: its next epoch starts no earlier than where it ended.
        offset = max(now - self._start, self.end)
        return Epoch(index, offset, offset - self.end)

    def split(self, epoch: Epoch, gap_s: float) -> Epoch:
        """A new epoch inside the same input (same offset) after ``gap_s`` seconds were
        lost, e.g. audio chunks dropped for a slow consumer."""
        index = self._next_index
        self._next_index += 1
        return Epoch(index, epoch.offset, gap_s)

    def seen(self, pts: float, duration: float) -> None:
        """Record an item at source ``pts`` lasting ``duration`` seconds."""
        self.end = max(self.end, pts + duration)


class PortSequence:
    """Gap-free ``seq`` of one port, and the discontinuity marks of its meta."""

    def __init__(self, port: str, resume: Resume | None) -> None:
        self.port = port
        self._next = resume.seqs.get(port, 0) if resume is not None else 0
        self._marked = -1  # the newest epoch whose gap this port has reported

    def stamp(self, epoch: Epoch) -> dict[str, Any]:
        """``{"seq": n}`` plus ``discontinuity``/``gap_s`` on the port's first item of
        an epoch that follows a gap."""
        meta: dict[str, Any] = {"seq": self._next}
        self._next += 1
        if epoch.gap_s is not None and epoch.index > self._marked:
            meta["discontinuity"] = True
            meta["gap_s"] = round(epoch.gap_s, 6)
        self._marked = max(self._marked, epoch.index)
        return meta
