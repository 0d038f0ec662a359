"""The sweep's decisions, as functions of what it read: no disk, no clock.

- :func:`choose_cutoff`: only artifacts saved before the cutoff may go. It is
  the grace period's start, moved earlier by every open run's *horizon* (the
  oldest save whose reference that run still holds in memory, not yet emitted).
- :func:`cap_excess`: how many bytes the disk cap wants gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Pin:
    """An open run that may hold references, not yet emitted, saved at or after ``horizon``."""

    run_id: str
    flow: str
    horizon: float


@dataclass(frozen=True)
class Cutoff:
    at: float  # artifacts saved strictly before this may be collected
    pinned_by: tuple[str, ...]  # runs that moved it earlier than the grace alone would


def choose_cutoff(now: float, grace_s: float, pins: Sequence[Pin]) -> Cutoff:
    """The cutoff for a sweep starting at ``now``.

    Never later than ``now``: a save that finishes while the sweep runs is
    always spared. A run's horizon earlier than ``now - grace_s`` holds the
    cutoff back to it, and is named in ``pinned_by``.
    """
    at = now - grace_s
    pinned = [pin for pin in pins if pin.horizon < at]
    if pinned:
        at = min(pin.horizon for pin in pinned)
    return Cutoff(at, tuple(pin.run_id for pin in pinned))


def cap_excess(stored_bytes: int, max_bytes: int | None) -> int:
    """Bytes over the cap (0 when under it or when there is no cap)."""
    if max_bytes is None:
        return 0
    return max(0, stored_bytes - max_bytes)
