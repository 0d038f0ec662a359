"""What the outage runs count, from what arrived, and the spread over runs. Pure."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

TARGET_MQTT = 0.5
"""The sink's events/s at QoS 1 as a share of the bare client's (issue 29)."""
MARGIN = 0.05
"""A target counts as met when every run clears it by this much (this machine's
runs spread by more than that on their own)."""


@dataclass(frozen=True)
class Arrival:
    """``emitted`` events, numbered 0.. in order, against what arrived."""

    emitted: int
    distinct: int  # events that arrived at least once
    missing: int
    in_order: bool  # first arrivals in emission order
    repeats: int  # arrivals after an event's first
    unmarked_repeats: int  # of those, neither a redelivery nor the broker's DUP
    all_verified: bool = True  # the webhook's signatures

    @property
    def ok(self) -> bool:
        return (
            self.missing == 0
            and self.in_order
            and self.unmarked_repeats == 0
            and self.all_verified
            and self.distinct == self.emitted
        )


def arrival(emitted: int, got: Sequence[tuple[int, bool]], verified: bool = True) -> Arrival:
    """Judge ``got``: each arrival's event number and whether it was marked as sent
    again (the body's ``redelivery`` or the MQTT DUP flag), in arrival order."""
    seen: set[int] = set()
    first: list[int] = []
    repeats = unmarked = 0
    for n, marked in got:
        if n in seen:
            repeats += 1
            unmarked += 0 if marked else 1
        else:
            seen.add(n)
            first.append(n)
    return Arrival(
        emitted=emitted,
        distinct=len(seen),
        missing=len(set(range(emitted)) - seen),
        in_order=first == sorted(first),
        repeats=repeats,
        unmarked_repeats=unmarked,
        all_verified=verified,
    )


def spread(values: Sequence[float | None]) -> tuple[float, float, float] | None:
    """(median, min, max) of the values that exist, None if none does."""
    have = [v for v in values if v is not None]
    if not have:
        return None
    return statistics.median(have), min(have), max(have)


def target_met(ratios: Sequence[float | None], target: float = TARGET_MQTT) -> str:
    """MET when 3 runs or more each clear ``target`` by :data:`MARGIN`."""
    if not ratios or any(r is None for r in ratios):
        return "NOT MEASURED"
    if any(r is not None and r < target for r in ratios):
        return f"NOT MET: below {target:.0%} in some run"
    if any(r is not None and r < target + MARGIN for r in ratios):
        return f"MET WITHOUT MARGIN: some run within {MARGIN:.0%} of the target"
    return "MET" if len(ratios) >= 3 else "MET in every run (fewer than 3 runs)"
