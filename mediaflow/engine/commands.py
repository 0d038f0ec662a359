"""Commands: what the reducer asks the runner to do, as frozen values.

Three are answers the asking hand-off performs itself: ``ClaimCommand`` (the
claimer's :class:`~.ticks.ClaimDueTick`), ``JournalCommand`` (the group
commit's :class:`~.ticks.CommitDueTick`) and ``LeaseCommand`` (the lease
round's :class:`~.ticks.LeaseDueTick`). The runner applies every other one.

Every part of the engine reaches the reducer the same way, through a
:data:`Dispatch`: it builds its own tick, hands it over, and reads the answer
meant for it (if any) with :func:`answer`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeVar

from mediaflow.engine.ticks import Tick
from mediaflow.queue.contract import StreamKey, WorkItem


@dataclass(frozen=True, slots=True)
class StartNodeCommand:
    """Run ``stream``'s node on ``items``, one after the other, in order.

    ``attempt`` counts the runs of ``items[0]`` from 1 (the others run for the
    first time). ``commit_first``: make every buffered ack durable before the
    first item starts (it may kill the process again: after a crash, only it
    should be delivered once more).
    """

    stream: StreamKey
    items: tuple[WorkItem, ...]
    attempt: int = 1
    commit_first: bool = False
    type: Literal["start_node"] = "start_node"


@dataclass(frozen=True, slots=True)
class RecallCommand:
    """End ``stream``'s running batch after the item it is running now."""

    stream: StreamKey
    type: Literal["recall"] = "recall"


@dataclass(frozen=True, slots=True)
class AckCommand:
    entry_ids: tuple[str, ...]
    type: Literal["ack"] = "ack"


@dataclass(frozen=True, slots=True)
class DeadLetterCommand:
    item: WorkItem
    reason: str
    type: Literal["dead_letter"] = "dead_letter"


@dataclass(frozen=True, slots=True)
class ReleaseCommand:
    """Hand items held in memory back to the queue unacked (on stop). ``started``
    False: they never ran, so their claim does not count as a delivery."""

    entry_ids: tuple[str, ...]
    started: bool = False
    type: Literal["release"] = "release"


@dataclass(frozen=True, slots=True)
class WakeAtCommand:
    """Deliver a :class:`~mediaflow.engine.ticks.TimerTick` at ``at`` (monotonic seconds)."""

    at: float
    type: Literal["wake_at"] = "wake_at"


@dataclass(frozen=True, slots=True)
class WakeClaimerCommand:
    """Work may be claimable now (room freed in a line whose work waits on disk,
    a stream fell behind, a step): the claimer should not wait for its poll."""

    type: Literal["wake_claimer"] = "wake_claimer"


@dataclass(frozen=True, slots=True)
class ClaimCommand:
    """Claim up to ``wants[stream]`` items per stream, oldest first."""

    wants: Mapping[StreamKey, int]
    type: Literal["claim"] = "claim"


@dataclass(frozen=True, slots=True)
class JournalCommand:
    """Journal the group commit, claiming the first ``claims[stream]`` new
    emissions of each stream for this process in the same transaction."""

    claims: Mapping[StreamKey, int]
    type: Literal["journal"] = "journal"


@dataclass(frozen=True, slots=True)
class PublishEventCommand:
    event_type: str
    data: Mapping[str, Any] = field(default_factory=dict)
    type: Literal["publish"] = "publish"


@dataclass(frozen=True, slots=True)
class LeaseCommand:
    """Renew the leases on ``hold``, try to take ``acquire``, give up ``release``
    (after committing what is buffered: the next holder must not run again
    what this process finished)."""

    hold: tuple[StreamKey, ...]
    acquire: tuple[StreamKey, ...] = ()
    release: tuple[StreamKey, ...] = ()
    type: Literal["lease"] = "lease"


Command: TypeAlias = (
    StartNodeCommand
    | RecallCommand
    | AckCommand
    | DeadLetterCommand
    | ReleaseCommand
    | WakeAtCommand
    | WakeClaimerCommand
    | ClaimCommand
    | JournalCommand
    | LeaseCommand
    | PublishEventCommand
)

Dispatch: TypeAlias = Callable[[Tick], list[Command]]
"""Reduce a tick and apply its commands; returns the answers the caller performs
itself. Synchronous: nothing interleaves between a tick and its commands."""

Answer = TypeVar("Answer", ClaimCommand, JournalCommand, LeaseCommand)


def answer(answers: list[Command], kind: type[Answer]) -> Answer | None:
    """The answer of type ``kind`` among a dispatch's ``answers``, or None."""
    for command in answers:
        if isinstance(command, kind):
            return command
    return None
