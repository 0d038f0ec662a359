"""Ticks: what happened, fed to the reducer one at a time.

Ticks are frozen and carry everything the reducer needs; the current time is
passed to the reducer separately, so a recorded run replays exactly
(:mod:`.trace`). Each has a ``type`` literal, its name in a trace, and is
written to a trace from its fields and their type hints: a new tick needs no
code in :mod:`.trace`, only field types it knows (a field's ``trace``
metadata names it in a trace when its name there differs).

The two hand-offs that move work into this process come in pairs, a request
the reducer answers with one command and the outcome:

* claiming work that waits on disk: :class:`ClaimDueTick` ->
  ``ClaimCommand`` -> :class:`ClaimedTick` or :class:`ClaimFailedTick`;
* journaling this process's emissions (the group commit):
  :class:`CommitDueTick` -> ``JournalCommand`` (how many to claim at once) ->
  :class:`CommittedTick` or :class:`CommitFailedTick`;
* sharing ordered streams with the flow's other executors:
  :class:`LeaseDueTick` -> ``LeaseCommand`` -> :class:`LeasedTick` (a failed
  lease call changes nothing: leases simply lapse).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias, get_args

from mediaflow.node import RetryPolicy
from mediaflow.queue.contract import StreamKey, WorkItem


@dataclass(frozen=True, slots=True)
class ClaimDueTick:
    """The claimer may fetch work. ``poll``: it waited without being woken, so it
    also looks for work other processes enqueued for caught-up streams."""

    poll: bool = False
    type: Literal["claim_due"] = "claim_due"


@dataclass(frozen=True, slots=True)
class ClaimedTick:
    """The claim the last ``ClaimCommand`` asked for returned ``items``."""

    items: tuple[WorkItem, ...]
    type: Literal["claimed"] = "claimed"


@dataclass(frozen=True, slots=True)
class ClaimFailedTick:
    """The claim the last ``ClaimCommand`` asked for failed (the queue did not answer)."""

    type: Literal["claim_failed"] = "claim_failed"


@dataclass(frozen=True, slots=True)
class CommitDueTick:
    """A group commit is about to journal ``counts[stream]`` new emissions per
    reader stream (in the order they were emitted)."""

    counts: Mapping[StreamKey, int]
    type: Literal["commit_due"] = "commit_due"


@dataclass(frozen=True, slots=True)
class CommittedTick:
    """The group commit landed; ``items`` were claimed for this process in it."""

    items: tuple[WorkItem, ...]
    type: Literal["committed"] = "committed"


@dataclass(frozen=True, slots=True)
class CommitFailedTick:
    """The group commit failed; its emissions stay buffered for the next one."""

    type: Literal["commit_failed"] = "commit_failed"


@dataclass(frozen=True, slots=True)
class ItemsArrivedTick:
    """Items were claimed for this process outside a claim or a commit (a run's
    source items, enqueued and claimed at start)."""

    items: tuple[WorkItem, ...]
    type: Literal["items_arrived"] = "items_arrived"


@dataclass(frozen=True, slots=True)
class BacklogBehindTick:
    """Work for ``streams`` waits on disk again (a reclaim handed it back)."""

    streams: frozenset[StreamKey]
    type: Literal["backlog_behind"] = "backlog_behind"


@dataclass(frozen=True, slots=True)
class NodeFinishedTick:
    """The batch whose first item is ``entry_id`` ended after its first ``done``
    items succeeded. ``error``: item ``done`` raised it; ``away``: ``"store"``,
    ``"queue"`` or a node's named service (``"mqtt"``) when it raised only because
    that was away (:func:`~.away.away_from`), which is not the item's failure;
    ``refused``: it raised :class:`~mediaflow.node.ItemRefused` (no retry). Without an error
    and ``done`` short of the batch, the rest never started (recalled, or the
    node yielded its turn)."""

    stream: StreamKey
    entry_id: str = field(metadata={"trace": "id"})
    done: int
    error: str | None = None
    away: str | None = None
    refused: bool = field(default=False, metadata={"trace": "omit_default"})
    type: Literal["node_finished"] = "node_finished"


@dataclass(frozen=True, slots=True)
class TimerTick:
    """Time passed; retries whose backoff elapsed may start."""

    type: Literal["timer"] = "timer"


@dataclass(frozen=True, slots=True)
class BacklogSampledTick:
    """Unacked items per flow, as the queue reported them just now."""

    per_flow: Mapping[str, int]
    type: Literal["backlog_sampled"] = "backlog_sampled"


ControlAction = Literal["pause", "resume", "step", "disable", "enable"]
"""What an operator asks of a flow (see :class:`ControlTick`)."""
CONTROL_ACTIONS: Final[tuple[ControlAction, ...]] = get_args(ControlAction)


@dataclass(frozen=True, slots=True)
class ControlTick:
    """An operator's request for ``flow``.

    - ``pause``: stop starting items (sources keep running; work waits in the queue);
    - ``resume``: undo ``pause``;
    - ``step``: while paused, let exactly one more item start;
    - ``disable``: the sources end (their items go back to the queue, to be
      resumed), nothing else of the flow starts, its work is kept;
    - ``enable``: undo ``disable``: the sources are claimed again and resume.
    """

    flow: str
    action: ControlAction = field(metadata={"trace": "type"})

    @property
    def type(self) -> ControlAction:
        """The action is the tick's type in a trace (``{"type": "pause", ...}``)."""
        return self.action


@dataclass(frozen=True, slots=True)
class HaltTick:
    """Tell the sources of ``streams`` to end without ending the run (a reload):
    each hands its item back when it returns."""

    streams: frozenset[StreamKey]
    type: Literal["halt"] = "halt"


@dataclass(frozen=True, slots=True)
class ReshapeTick:
    """The flow's nodes changed (a reload): these are its streams now, which of
    them are sources and which ordered. ``rebuilt``: streams whose node was
    replaced; their items waiting in memory go back to the queue for the new
    node, and a halted source among them may start again. ``retries``: the
    streams whose node retries by its own policy."""

    streams: tuple[StreamKey, ...]
    sources: frozenset[StreamKey]
    ordered: frozenset[StreamKey]
    rebuilt: frozenset[StreamKey]
    rates: Mapping[StreamKey, float]
    retries: Mapping[StreamKey, RetryPolicy] = field(
        default_factory=dict, metadata={"trace": "omit_default"}
    )
    type: Literal["reshape"] = "reshape"


@dataclass(frozen=True, slots=True)
class LeaseDueTick:
    """Time to renew leases, as the last lease call left the table: the ordered
    streams this process holds (``mine``), those others hold, and this
    process's ``rank`` among the flow's ``members`` live executors."""

    mine: frozenset[StreamKey]
    others: frozenset[StreamKey]
    rank: int
    members: int
    type: Literal["lease_due"] = "lease_due"


@dataclass(frozen=True, slots=True)
class LeasedTick:
    """The lease call landed: this process holds ``mine``; of those, it took
    ``taken_over`` from a holder that lost them, with that holder's items."""

    mine: frozenset[StreamKey]
    taken_over: frozenset[StreamKey] = frozenset()
    type: Literal["leased"] = "leased"


@dataclass(frozen=True, slots=True)
class StopTick:
    """Shutting down: start nothing new; release what waits in memory."""

    type: Literal["stop"] = "stop"


Tick: TypeAlias = (
    ClaimDueTick
    | ClaimedTick
    | ClaimFailedTick
    | CommitDueTick
    | CommittedTick
    | CommitFailedTick
    | ItemsArrivedTick
    | BacklogBehindTick
    | NodeFinishedTick
    | TimerTick
    | BacklogSampledTick
    | ControlTick
    | HaltTick
    | ReshapeTick
    | LeaseDueTick
    | LeasedTick
    | StopTick
)
