"""Commands: what the reducer asks the runner to do, as frozen values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from mediaflow.queue.contract import StreamKey, WorkItem


@dataclass(frozen=True)
class StartNodeCommand:
    """Run the node of ``item.stream`` for ``item`` (``attempt`` counts from 1)."""

    item: WorkItem
    attempt: int
    type: Literal["start_node"] = "start_node"


@dataclass(frozen=True)
class AckCommand:
    entry_id: str
    type: Literal["ack"] = "ack"


@dataclass(frozen=True)
class DeadLetterCommand:
    item: WorkItem
    reason: str
    type: Literal["dead_letter"] = "dead_letter"


@dataclass(frozen=True)
class ReleaseCommand:
    """Hand items held in memory back to the queue unacked (on stop). ``started``
    False: they never ran, so their claim does not count as a delivery."""

    entry_ids: tuple[str, ...]
    started: bool = False
    type: Literal["release"] = "release"


@dataclass(frozen=True)
class WakeAtCommand:
    """Deliver a :class:`~mediaflow.engine.ticks.TimerTick` at ``at`` (monotonic seconds)."""

    at: float
    type: Literal["wake_at"] = "wake_at"


@dataclass(frozen=True)
class PublishEventCommand:
    event_type: str
    data: Mapping[str, Any] = field(default_factory=dict)
    type: Literal["publish"] = "publish"


Command: TypeAlias = (
    StartNodeCommand
    | AckCommand
    | DeadLetterCommand
    | ReleaseCommand
    | WakeAtCommand
    | PublishEventCommand
)

__all__ = [
    "AckCommand",
    "Command",
    "DeadLetterCommand",
    "PublishEventCommand",
    "ReleaseCommand",
    "StartNodeCommand",
    "StreamKey",
    "WakeAtCommand",
]
