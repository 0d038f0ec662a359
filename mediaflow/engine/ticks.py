"""Ticks: what happened, fed to the reducer one at a time.

Ticks are frozen and carry everything the reducer needs; the current time is
passed to the reducer separately so a tick can be replayed deterministically.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from mediaflow.queue.contract import StreamKey, WorkItem


@dataclass(frozen=True)
class ItemsArrivedTick:
    """Items were claimed for this process (by a claim, a reclaim or at enqueue)."""

    items: tuple[WorkItem, ...]
    # Streams for which the claim returned fewer items than asked and nothing was
    # left on disk since: their next emissions may be claimed at enqueue.
    drained: frozenset[StreamKey] = frozenset()
    type: Literal["items_arrived"] = "items_arrived"


@dataclass(frozen=True)
class BacklogBehindTick:
    """Work for ``streams`` waits on disk (an unclaimed emission, a reclaim)."""

    streams: frozenset[StreamKey]
    type: Literal["backlog_behind"] = "backlog_behind"


@dataclass(frozen=True)
class NodeFinishedTick:
    """A node run for ``entry_id`` returned (``error`` is None) or raised."""

    stream: StreamKey
    entry_id: str
    error: str | None = None
    type: Literal["node_finished"] = "node_finished"


@dataclass(frozen=True)
class TimerTick:
    """Time passed; retries whose backoff elapsed may start."""

    type: Literal["timer"] = "timer"


@dataclass(frozen=True)
class BacklogSampledTick:
    """Unacked items per flow, as the queue reported them just now."""

    per_flow: Mapping[str, int]
    type: Literal["backlog_sampled"] = "backlog_sampled"


@dataclass(frozen=True)
class PauseTick:
    """Stop starting items of ``flow`` (sources keep running; work waits in the queue)."""

    flow: str
    type: Literal["pause"] = "pause"


@dataclass(frozen=True)
class ResumeTick:
    flow: str
    type: Literal["resume"] = "resume"


@dataclass(frozen=True)
class StepTick:
    """While paused, let exactly one more item of ``flow`` start."""

    flow: str
    type: Literal["step"] = "step"


@dataclass(frozen=True)
class StopTick:
    """Shutting down: start nothing new; release what waits in memory."""

    type: Literal["stop"] = "stop"


Tick: TypeAlias = (
    ItemsArrivedTick
    | BacklogBehindTick
    | NodeFinishedTick
    | TimerTick
    | BacklogSampledTick
    | PauseTick
    | ResumeTick
    | StepTick
    | StopTick
)
