"""The reducer's state: every scheduling fact of one runner, in frozen values.

:class:`EngineState` is the one place these facts live; the runner keeps it
private and exposes it only through :func:`stream_counts` and the other
queries here (pure functions of the state). Nothing in it is I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mediaflow.config import EngineSettings
from mediaflow.node import RetryPolicy
from mediaflow.queue.contract import StreamKey, WorkItem


@dataclass(frozen=True, slots=True)
class Limits:
    max_deliveries: int = 5
    max_attempts: int = 3
    retry_base_s: float = 0.2
    retry_max_s: float = 10.0
    node_buffer: int = 256
    degraded_samples: int = 5
    degraded_min_items: int = 1000

    @classmethod
    def from_settings(cls, settings: EngineSettings) -> Limits:
        return cls(
            max_deliveries=settings.max_deliveries,
            max_attempts=settings.max_attempts,
            retry_base_s=settings.retry_base_s,
            retry_max_s=settings.retry_max_s,
            node_buffer=settings.node_buffer,
            degraded_samples=settings.degraded_samples,
            degraded_min_items=settings.degraded_min_items,
        )


@dataclass(frozen=True, slots=True)
class StreamState:
    """Every fact the reducer keeps of one stream (one node's line).

    The line: ``waiting`` is sorted by ``seq``. ``running`` is the batch the
    node's task runs, in order (empty when idle). ``attempt`` counts the runs of
    the head item: ``running[0]`` while it runs, ``waiting[0]`` while a retry
    backs off until ``retry_at``; ``away`` counts the runs in a row that failed
    only because a dependency was away, which cost no attempt and lengthen the
    backoff. ``recalled``: the running batch was told to stop after its current
    item (pause, stop).

    Admission (:mod:`.admission`): ``caught_up``, nothing older of the stream
    waits on disk, so its new emissions may be claimed at enqueue without
    overtaking anything. ``careful``: draining work a crashed process left, one
    item in memory at a time, acks committed before each start, until caught
    up. ``behind_mark`` is bumped whenever work of the stream is left on disk:
    a claim asked before the bump cannot prove it caught up, even if it came
    back short. ``reserved``: room promised to the group commit in flight.

    Leases (:mod:`.leasing`): ``ordered``, the node's items run in order, so the
    stream is claimed only under a lease (fixed for the flow's shape);
    ``leased``, this process holds it; ``draining``, it is being handed to
    another executor: no new work is taken, the lease goes once the line is
    empty.

    ``halted``: a source told to end without ending the run (disable, a
    reload): ``ctx.stopping()`` is true for it, and its item goes back to the
    queue when it returns, so it resumes when started again. ``interval``: a
    rate-limited node's least time between two starts (``max_rate``); ``gate``
    the time before which it may not start again. ``retry``: the node's own retry
    policy (:meth:`~mediaflow.node.Node.retry_policy`), None for the engine's
    (:func:`retry_of`).
    """

    is_source: bool = False
    waiting: tuple[WorkItem, ...] = ()
    running: tuple[WorkItem, ...] = ()
    attempt: int = 0
    retry_at: float | None = None
    away: int = 0
    recalled: bool = False
    caught_up: bool = False
    careful: bool = False
    behind_mark: int = 0
    reserved: int = 0
    ordered: bool = False
    leased: bool = False
    draining: bool = False
    halted: bool = False
    interval: float | None = None
    gate: float | None = None
    retry: RetryPolicy | None = None

    def holds(self, entry_id: str) -> bool:
        return any(item.entry_id == entry_id for item in (*self.running, *self.waiting))

    @property
    def held(self) -> int:
        return len(self.waiting) + len(self.running)


@dataclass(frozen=True, slots=True)
class ClaimInFlight:
    """The claim the reducer asked for and has not heard back about: per stream,
    how many it asked and the stream's behind mark when it asked."""

    asked: Mapping[StreamKey, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class EngineState:
    """The runner's facts: one :class:`StreamState` per stream (``nodes``), and
    the flows' and the process's own. The sets of streams with a fact (``caught_up``,
    ``leased``, ...) are read-only views of the streams, for readers and tests."""

    limits: Limits
    nodes: Mapping[StreamKey, StreamState]
    paused: frozenset[str] = frozenset()
    steps: Mapping[str, int] = field(default_factory=dict)
    # Disabled flows (also paused): their sources were told to end (halted).
    disabled: frozenset[str] = frozenset()
    backlog_history: tuple[int, ...] = ()
    degraded: bool = False
    stopping: bool = False
    claim: ClaimInFlight | None = None

    def _having(self, fact: str) -> frozenset[StreamKey]:
        return frozenset(s for s, n in self.nodes.items() if getattr(n, fact))

    @property
    def caught_up(self) -> frozenset[StreamKey]:
        return self._having("caught_up")

    @property
    def careful(self) -> frozenset[StreamKey]:
        return self._having("careful")

    @property
    def ordered(self) -> frozenset[StreamKey]:
        return self._having("ordered")

    @property
    def leased(self) -> frozenset[StreamKey]:
        return self._having("leased")

    @property
    def draining(self) -> frozenset[StreamKey]:
        return self._having("draining")

    @property
    def halted(self) -> frozenset[StreamKey]:
        return self._having("halted")

    @property
    def reserved(self) -> Mapping[StreamKey, int]:
        return {s: n.reserved for s, n in self.nodes.items() if n.reserved}

    @property
    def behind_marks(self) -> Mapping[StreamKey, int]:
        return {s: n.behind_mark for s, n in self.nodes.items() if n.behind_mark}

    @property
    def rates(self) -> Mapping[StreamKey, float]:
        return {s: n.interval for s, n in self.nodes.items() if n.interval is not None}

    @property
    def gates(self) -> Mapping[StreamKey, float]:
        return {s: n.gate for s, n in self.nodes.items() if n.gate is not None}


def with_streams(state: EngineState, streams: Iterable[StreamKey], **facts: Any) -> EngineState:
    """``state`` with ``facts`` (:class:`StreamState` fields) set on each of
    ``streams`` it has (others are ignored)."""
    nodes = dict(state.nodes)
    for stream in streams:
        node = nodes.get(stream)
        if node is not None:
            nodes[stream] = replace(node, **facts)
    return replace(state, nodes=nodes)


def initial_state(
    limits: Limits,
    streams: Iterable[StreamKey],
    sources: Iterable[StreamKey] = (),
    *,
    resumed: bool = False,
    ordered: Iterable[StreamKey] = (),
    rates: Mapping[StreamKey, float] | None = None,
    retries: Mapping[StreamKey, RetryPolicy] | None = None,
) -> EngineState:
    """The state of a runner that holds nothing yet. ``resumed``: the flow's last
    run crashed, so every non-source stream starts careful. ``ordered``: the
    streams to claim only under a lease (none leased yet). ``rates``: the least
    seconds between two starts of a rate-limited stream. ``retries``: the streams
    whose node retries by its own policy."""
    source_set = set(sources)
    keys = list(streams)
    keys.extend(s for s in source_set if s not in keys)
    ordered_set, intervals, policies = set(ordered), rates or {}, retries or {}
    nodes = {
        s: StreamState(
            is_source=s in source_set,
            careful=resumed and s not in source_set,
            ordered=s in ordered_set and s not in source_set,
            interval=intervals.get(s),
            retry=policies.get(s),
        )
        for s in keys
    }
    return EngineState(limits=limits, nodes=nodes)


def may_claim(state: EngineState, stream: StreamKey) -> bool:
    """Whether this process may take work of ``stream``: a stream of an ordered
    node only while it holds the stream's lease and is not handing it over."""
    node = state.nodes[stream]
    return not node.ordered or (node.leased and not node.draining)


def line_limit(state: EngineState, stream: StreamKey) -> int:
    """How many items ``stream``'s line may hold in memory.

    A careful stream holds only the item it runs: after a crash, a claim counts
    a delivery, and items waiting in memory when the process died again would
    be counted without having run.
    """
    return 1 if state.nodes[stream].careful else state.limits.node_buffer


def room(state: EngineState, stream: StreamKey) -> int:
    """Free places in ``stream``'s line, net of what the commit in flight claims."""
    node = state.nodes[stream]
    return line_limit(state, stream) - node.held - node.reserved


def held_ids(state: EngineState) -> list[str]:
    """Every entry this process holds (to keep their leases alive)."""
    return [
        item.entry_id for node in state.nodes.values() for item in (*node.running, *node.waiting)
    ]


def is_idle(state: EngineState) -> bool:
    """Nothing running and nothing waiting in memory."""
    return all(node.held == 0 for node in state.nodes.values())


def is_settled(state: EngineState) -> bool:
    """Idle, and every stream this process may claim caught up: no work of ours
    known to wait on disk (a paused flow's never is). Only then may the queue be
    empty for the flow (streams other executors hold are theirs to drain)."""
    return is_idle(state) and all(
        n.caught_up for s, n in state.nodes.items() if may_claim(state, s)
    )


def backoff_s(limits: Limits | RetryPolicy, attempt: int) -> float:
    """Delay before attempt ``attempt + 1``: base doubled per failed attempt, capped."""
    # 2 ** attempt overflows a float past about a thousand attempts: cap the exponent.
    return float(min(limits.retry_max_s, limits.retry_base_s * 2 ** min(attempt - 1, 64)))


def retry_of(limits: Limits, node: StreamState) -> RetryPolicy:
    """The retry policy of ``node``'s stream: its own, else the engine's."""
    if node.retry is not None:
        return node.retry
    return RetryPolicy(limits.max_attempts, limits.retry_base_s, limits.retry_max_s)


def stream_counts(state: EngineState) -> Mapping[StreamKey, tuple[int, bool]]:
    """Per stream: items held in memory and not running (the rest of a running
    batch counts as waiting), and whether one is running."""
    return {
        s: (len(n.waiting) + max(0, len(n.running) - 1), bool(n.running))
        for s, n in state.nodes.items()
    }
