"""How a flow run ended: why it stopped, and what it did (``FlowSession.stop`` returns it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

StopReason = Literal["idle", "time", "signal", "stopped", "error"]


@dataclass(frozen=True)
class RunOutcome:
    """One run's end. ``items``: node runs this process finished. ``failed_sources``:
    per source whose last run ended by an error and that was not started again
    (its retries used up, or the run stopped first), that error. A source that
    ended by itself or was stopped with the run is not in it."""

    run_id: str
    resumed: bool
    reason: StopReason
    items: int
    duration_s: float
    failed_sources: Mapping[str, str] = field(default_factory=dict)
