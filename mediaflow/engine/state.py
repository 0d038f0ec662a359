"""The reducer's state: every scheduling fact of one runner, in frozen values.

:class:`EngineState` is the one place these facts live; the runner keeps it
private and exposes it only through :func:`stream_counts` and the other
queries here (pure functions of the state). Nothing in it is I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mediaflow.config import EngineSettings
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
class NodeState:
    """One node's line.

    ``waiting`` is sorted by ``seq``. ``running`` is the batch the node's task
    runs, in order (empty when idle). ``attempt`` counts the runs of the head
    item: ``running[0]`` while it runs, ``waiting[0]`` while a retry backs off
    until ``retry_at``. ``recalled``: the running batch was told to stop after
    its current item (pause, stop).
    """

    is_source: bool = False
    waiting: tuple[WorkItem, ...] = ()
    running: tuple[WorkItem, ...] = ()
    attempt: int = 0
    retry_at: float | None = None
    recalled: bool = False

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
    limits: Limits
    nodes: Mapping[StreamKey, NodeState]
    paused: frozenset[str] = frozenset()
    steps: Mapping[str, int] = field(default_factory=dict)
    # Disabled flows (also paused): their sources were told to end.
    disabled: frozenset[str] = frozenset()
    # Source streams told to end without ending the run (disable, a reload):
    # ctx.stopping() is true for them, and their item goes back to the queue
    # when the source returns, so it resumes when started again.
    halted: frozenset[StreamKey] = frozenset()
    # Rate-limited streams (a node's max_rate): the least time between two
    # starts, and the time before which the next may not start.
    rates: Mapping[StreamKey, float] = field(default_factory=dict)
    gates: Mapping[StreamKey, float] = field(default_factory=dict)
    backlog_history: tuple[int, ...] = ()
    degraded: bool = False
    stopping: bool = False
    # Streams with nothing older waiting on disk: new emissions for them may be
    # claimed at enqueue without overtaking anything.
    caught_up: frozenset[StreamKey] = frozenset()
    # Streams draining work a crashed process left: one item in memory at a
    # time, acks committed before each start, until the stream catches up.
    careful: frozenset[StreamKey] = frozenset()
    # Bumped whenever work of a stream is left on disk: a claim asked before the
    # bump cannot prove the stream caught up, even if it came back short.
    behind_marks: Mapping[StreamKey, int] = field(default_factory=dict)
    claim: ClaimInFlight | None = None
    # Room promised to the group commit in flight (claimed at enqueue).
    reserved: Mapping[StreamKey, int] = field(default_factory=dict)
    # Streams of ordered nodes: claimed only under a lease, so one executor of
    # the flow runs each at a time (see .leasing). Fixed for the run.
    ordered: frozenset[StreamKey] = frozenset()
    leased: frozenset[StreamKey] = frozenset()
    # Leased streams being handed to another executor: no new work is taken;
    # the lease goes once the line is empty.
    draining: frozenset[StreamKey] = frozenset()


def initial_state(
    limits: Limits,
    streams: Iterable[StreamKey],
    sources: Iterable[StreamKey] = (),
    *,
    resumed: bool = False,
    ordered: Iterable[StreamKey] = (),
    rates: Mapping[StreamKey, float] | None = None,
) -> EngineState:
    """The state of a runner that holds nothing yet. ``resumed``: the flow's last
    run crashed, so every non-source stream starts careful. ``ordered``: the
    streams to claim only under a lease (none leased yet). ``rates``: the least
    seconds between two starts of a rate-limited stream."""
    source_set = set(sources)
    nodes = {s: NodeState(is_source=s in source_set) for s in streams}
    for s in source_set:
        nodes.setdefault(s, NodeState(is_source=True))
    careful = frozenset(s for s in nodes if s not in source_set) if resumed else frozenset()
    leasing = frozenset(s for s in ordered if s in nodes and s not in source_set)
    limited = {s: t for s, t in (rates or {}).items() if s in nodes}
    return EngineState(limits=limits, nodes=nodes, careful=careful, ordered=leasing, rates=limited)


def may_claim(state: EngineState, stream: StreamKey) -> bool:
    """Whether this process may take work of ``stream``: a stream of an ordered
    node only while it holds the stream's lease and is not handing it over."""
    return stream not in state.ordered or (stream in state.leased and stream not in state.draining)


def line_limit(state: EngineState, stream: StreamKey) -> int:
    """How many items ``stream``'s line may hold in memory.

    A careful stream holds only the item it runs: after a crash, a claim counts
    a delivery, and items waiting in memory when the process died again would
    be counted without having run.
    """
    return 1 if stream in state.careful else state.limits.node_buffer


def room(state: EngineState, stream: StreamKey) -> int:
    """Free places in ``stream``'s line, net of what the commit in flight claims."""
    node = state.nodes[stream]
    return line_limit(state, stream) - node.held - state.reserved.get(stream, 0)


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
    return is_idle(state) and all(s in state.caught_up for s in state.nodes if may_claim(state, s))


def backoff_s(limits: Limits, attempt: int) -> float:
    """Delay before attempt ``attempt + 1``: base doubled per failed attempt, capped."""
    return float(min(limits.retry_max_s, limits.retry_base_s * 2 ** (attempt - 1)))


def stream_counts(state: EngineState) -> Mapping[StreamKey, tuple[int, bool]]:
    """Per stream: items held in memory and not running (the rest of a running
    batch counts as waiting), and whether one is running."""
    return {
        s: (len(n.waiting) + max(0, len(n.running) - 1), bool(n.running))
        for s, n in state.nodes.items()
    }
