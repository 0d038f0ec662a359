"""The scheduling core: ``reduce(state, tick, now) -> (state, commands)``.

Pure: no I/O, no clock, no randomness. Everything the runner does follows
from the commands returned here, so the rules live in one place and are
tested as tables (``tests/test_reduce.py``):

* routing: an arrived item joins its node's waiting line, ordered by ``seq``;
* ordering per edge: a node runs one item at a time, oldest first, so chunks
  reach it in the order they were emitted however many are in flight;
* fan-out needs nothing here: the runner journals one item per reader;
* retry: a node that raises is re-run after a doubling backoff while its
  later items wait behind it (order is kept); after ``max_attempts`` the item
  is dead-lettered with a ``cascade_dropped`` event;
* ``max_deliveries``: an item the queue delivered too often (it crashed the
  process each time) is dead-lettered on arrival, never run again;
* backlog: a total that grows over ``degraded_samples`` samples raises
  ``engine_degraded`` naming the flow most of the work belongs to;
* pause/step: a paused flow starts nothing until resumed, except one item
  per step; sources keep running so nothing is lost while paused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import assert_never

from mediaflow.engine.commands import (
    AckCommand,
    Command,
    DeadLetterCommand,
    PublishEventCommand,
    ReleaseCommand,
    StartNodeCommand,
    WakeAtCommand,
)
from mediaflow.engine.ticks import (
    BacklogBehindTick,
    BacklogSampledTick,
    ItemsArrivedTick,
    NodeFinishedTick,
    PauseTick,
    ResumeTick,
    StepTick,
    StopTick,
    Tick,
    TimerTick,
)
from mediaflow.queue.contract import StreamKey, WorkItem


@dataclass(frozen=True)
class Limits:
    max_deliveries: int = 5
    max_attempts: int = 3
    retry_base_s: float = 0.2
    retry_max_s: float = 10.0
    node_buffer: int = 64
    degraded_samples: int = 5
    degraded_min_items: int = 1000


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node's line. ``waiting`` is sorted by ``seq``; while a retry backs off,
    the failed item is ``waiting[0]`` and ``retry_at`` says when it may rerun."""

    is_source: bool = False
    waiting: tuple[WorkItem, ...] = ()
    running: WorkItem | None = None
    attempt: int = 0
    retry_at: float | None = None

    def holds(self, entry_id: str) -> bool:
        if self.running is not None and self.running.entry_id == entry_id:
            return True
        return any(item.entry_id == entry_id for item in self.waiting)

    @property
    def held(self) -> int:
        return len(self.waiting) + (self.running is not None)


@dataclass(frozen=True, slots=True)
class EngineState:
    limits: Limits
    nodes: Mapping[StreamKey, NodeState]
    paused: frozenset[str] = frozenset()
    steps: Mapping[str, int] = field(default_factory=dict)
    backlog_history: tuple[int, ...] = ()
    degraded: bool = False
    stopping: bool = False
    # Streams with nothing older waiting on disk: new emissions for them may be
    # claimed at enqueue without overtaking anything.
    caught_up: frozenset[StreamKey] = frozenset()
    # Streams draining work a crashed process left: one item in memory at a
    # time, acks committed before each start, until the stream catches up.
    careful: frozenset[StreamKey] = frozenset()

    def with_nodes(
        self, nodes: Mapping[StreamKey, NodeState], steps: Mapping[str, int] | None = None
    ) -> EngineState:
        # Spelled out rather than dataclasses.replace: this runs twice per item.
        return EngineState(
            self.limits,
            nodes,
            self.paused,
            self.steps if steps is None else steps,
            self.backlog_history,
            self.degraded,
            self.stopping,
            self.caught_up,
            self.careful,
        )


Result = tuple[EngineState, list[Command]]


def initial_state(
    limits: Limits,
    streams: Iterable[StreamKey],
    sources: Iterable[StreamKey] = (),
    *,
    resumed: bool = False,
) -> EngineState:
    """The state of a runner that holds nothing yet. ``resumed``: the flow's last
    run crashed, so every non-source stream starts careful."""
    source_set = set(sources)
    nodes = {s: NodeState(is_source=s in source_set) for s in streams}
    for s in source_set:
        nodes.setdefault(s, NodeState(is_source=True))
    careful = frozenset(s for s in nodes if s not in source_set) if resumed else frozenset()
    return EngineState(limits=limits, nodes=nodes, careful=careful)


def reduce(state: EngineState, tick: Tick, now: float) -> Result:
    """Apply one tick. ``now`` is monotonic seconds, used for backoff deadlines."""
    match tick:
        case ItemsArrivedTick():
            return _on_items_arrived(state, tick, now)
        case BacklogBehindTick(streams=streams):
            return replace(state, caught_up=state.caught_up - streams), []
        case NodeFinishedTick():
            return _on_node_finished(state, tick, now)
        case TimerTick():
            return _start_ready(state, state.nodes.keys(), now, [])
        case BacklogSampledTick():
            return _on_backlog_sampled(state, tick)
        case PauseTick(flow=flow):
            paused = state.paused | {flow}
            # Work waits on disk while paused: nothing of the flow is caught up.
            caught_up = frozenset(s for s in state.caught_up if s.flow != flow)
            event = PublishEventCommand("flow_paused", {"flow": flow})
            return replace(state, paused=paused, caught_up=caught_up), [event]
        case ResumeTick(flow=flow):
            steps = {f: n for f, n in state.steps.items() if f != flow}
            resumed = replace(state, paused=state.paused - {flow}, steps=steps)
            event = PublishEventCommand("flow_resumed", {"flow": flow})
            return _start_ready(resumed, resumed.nodes.keys(), now, [event])
        case StepTick(flow=flow):
            if flow not in state.paused:
                return state, []
            steps = {**state.steps, flow: state.steps.get(flow, 0) + 1}
            return _start_ready(replace(state, steps=steps), state.nodes.keys(), now, [])
        case StopTick():
            return _on_stop(state)
        case _:
            assert_never(tick)


def wants(state: EngineState, *, caught_up_too: bool = False) -> dict[StreamKey, int]:
    """How many more items each stream may claim: room in its bounded line.

    A caught-up stream receives its work at enqueue, so it is left out unless
    ``caught_up_too`` (a periodic poll for work other processes enqueued). A
    source stream holds at most its one long-lived item. Nothing is wanted
    once stopping.
    """
    if state.stopping:
        return {}
    room: dict[StreamKey, int] = {}
    # Claim in batches (a claim is a transaction): a busy node asks again only
    # once a quarter of its line is free.
    low_water = max(1, state.limits.node_buffer // 4)
    for stream, node in state.nodes.items():
        if stream in state.caught_up and not caught_up_too:
            continue
        if node.is_source:
            if node.held == 0:
                room[stream] = 1
            continue
        free = _line_limit(state, stream) - node.held
        if free >= low_water or (free > 0 and node.held == 0):
            room[stream] = free
    return room


def local_room(state: EngineState, stream: StreamKey) -> int:
    """How many new emissions for ``stream`` may be claimed for this process at
    enqueue: room in its line, but none if older work of the stream waits on
    disk (a new item would overtake it), its flow is paused, or we are stopping.
    """
    if stream not in state.caught_up or stream.flow in state.paused or state.stopping:
        return 0
    node = state.nodes.get(stream)
    return 0 if node is None else max(0, _line_limit(state, stream) - node.held)


def _line_limit(state: EngineState, stream: StreamKey) -> int:
    # A careful stream holds only the item it runs: after a crash, a claim
    # counts a delivery, and items waiting in memory when the process died
    # again would be counted without having run.
    return 1 if stream in state.careful else state.limits.node_buffer


def held_ids(state: EngineState) -> list[str]:
    """Every entry this process holds (to keep their leases alive)."""
    ids: list[str] = []
    for node in state.nodes.values():
        if node.running is not None:
            ids.append(node.running.entry_id)
        ids.extend(item.entry_id for item in node.waiting)
    return ids


def is_idle(state: EngineState) -> bool:
    """Nothing running and nothing waiting in memory."""
    return all(node.held == 0 for node in state.nodes.values())


def backoff_s(limits: Limits, attempt: int) -> float:
    """Delay before attempt ``attempt + 1``: base doubled per failed attempt, capped."""
    return float(min(limits.retry_max_s, limits.retry_base_s * 2 ** (attempt - 1)))


def _dropped(item: WorkItem, reason: str, attempts: int) -> list[Command]:
    return [
        DeadLetterCommand(item, reason),
        PublishEventCommand(
            "cascade_dropped",
            {
                "flow": item.stream.flow,
                "node": item.stream.node,
                "entry_id": item.entry_id,
                "seq": item.seq,
                "deliveries": item.deliveries,
                "attempts": attempts,
                "reason": reason,
            },
        ),
    ]


def _on_items_arrived(state: EngineState, tick: ItemsArrivedTick, now: float) -> Result:
    nodes = dict(state.nodes)
    commands: list[Command] = []
    touched: set[StreamKey] = set()
    # A paused flow's claims come back empty whatever waits on disk: they prove nothing.
    drained = frozenset(s for s in tick.drained if s.flow not in state.paused)
    if drained:
        state = replace(state, caught_up=state.caught_up | drained, careful=state.careful - drained)
    for item in tick.items:
        node = nodes.get(item.stream)
        if node is None:
            reason = f"no node {item.stream.node!r} in flow {item.stream.flow!r} to run it"
            commands.extend(_dropped(item, reason, 0))
        elif state.stopping:
            commands.append(ReleaseCommand((item.entry_id,)))
        elif item.deliveries > 1 and node.holds(item.entry_id):
            # Claimed again after our lease lapsed: we already have it in line.
            # (Only a redelivery can be a duplicate; the check is a scan.)
            continue
        elif item.deliveries > state.limits.max_deliveries and not node.is_source:
            # Sources are resumed, never dead-lettered: their item is redelivered
            # whenever any crash ends the process, whoever caused it.
            reason = (
                f"delivered {item.deliveries} times "
                f"(MEDIAFLOW_MAX_DELIVERIES={state.limits.max_deliveries})"
            )
            commands.extend(_dropped(item, reason, 0))
        else:
            nodes[item.stream] = NodeState(
                node.is_source,
                _insert_by_seq(node.waiting, item),
                node.running,
                node.attempt,
                node.retry_at,
            )
            touched.add(item.stream)
    return _start_ready(state.with_nodes(nodes), touched, now, commands)


def _insert_by_seq(line: tuple[WorkItem, ...], item: WorkItem) -> tuple[WorkItem, ...]:
    # Claims arrive in seq order, so the common case appends; a redelivered
    # item (lower seq) slots in front of younger ones.
    if not line or line[-1].seq <= item.seq:
        return (*line, item)
    for index, other in enumerate(line):
        if item.seq < other.seq:
            return (*line[:index], item, *line[index:])
    return (*line, item)


def _on_node_finished(state: EngineState, tick: NodeFinishedTick, now: float) -> Result:
    node = state.nodes.get(tick.stream)
    if node is None or node.running is None or node.running.entry_id != tick.entry_id:
        return state, []
    item = node.running
    commands: list[Command] = []
    if tick.error is None:
        commands.append(AckCommand(item.entry_id))
        node = NodeState(node.is_source, node.waiting)
    elif node.attempt >= state.limits.max_attempts or state.stopping:
        if state.stopping:
            # Shutting down: leave the item for the next run instead of burning attempts.
            commands.append(ReleaseCommand((item.entry_id,), started=True))
        else:
            commands.extend(_dropped(item, tick.error, node.attempt))
        node = replace(node, running=None, attempt=0, retry_at=None)
    else:
        delay = backoff_s(state.limits, node.attempt)
        node = replace(node, running=None, waiting=(item, *node.waiting), retry_at=now + delay)
        commands.append(WakeAtCommand(now + delay))
        commands.append(
            PublishEventCommand(
                "cascade_retry",
                {
                    "flow": item.stream.flow,
                    "node": item.stream.node,
                    "entry_id": item.entry_id,
                    "seq": item.seq,
                    "attempt": node.attempt,
                    "retry_in_s": delay,
                    "error": tick.error,
                },
            )
        )
    nodes = {**state.nodes, tick.stream: node}
    return _start_ready(state.with_nodes(nodes), (tick.stream,), now, commands)


def _start_ready(
    state: EngineState, streams: Iterable[StreamKey], now: float, commands: list[Command]
) -> Result:
    if state.stopping:
        return state, commands
    candidates = [s for s in streams if _can_start(state.nodes[s], now)]
    if not candidates:
        return state, commands
    nodes = dict(state.nodes)
    steps = dict(state.steps)
    # Oldest head first (a single step goes to the work that waited longest); ties
    # broken by id and stream so the same ticks always give the same commands.
    if len(candidates) > 1:
        candidates.sort(
            key=lambda s: (nodes[s].waiting[0].enqueued_at, nodes[s].waiting[0].entry_id, s)
        )
    for stream in candidates:
        node = nodes[stream]
        if stream.flow in state.paused and not node.is_source:
            if steps.get(stream.flow, 0) <= 0:
                continue
            steps[stream.flow] -= 1
        attempt = node.attempt + 1 if node.retry_at is not None else 1
        nodes[stream] = NodeState(node.is_source, node.waiting[1:], node.waiting[0], attempt)
        commands.append(StartNodeCommand(node.waiting[0], attempt))
    return state.with_nodes(nodes, steps), commands


def _can_start(node: NodeState, now: float) -> bool:
    if node.running is not None or not node.waiting:
        return False
    return node.retry_at is None or node.retry_at <= now


def _on_backlog_sampled(state: EngineState, tick: BacklogSampledTick) -> Result:
    limits = state.limits
    total = sum(tick.per_flow.values())
    history = (*state.backlog_history, total)[-limits.degraded_samples :]
    growing = len(history) == limits.degraded_samples and all(a < b for a, b in pairwise(history))
    commands: list[Command] = []
    degraded = state.degraded
    if not degraded and growing and total >= limits.degraded_min_items:
        degraded = True
        flow = max(tick.per_flow.items(), key=lambda kv: kv[1])[0]
        commands.append(
            PublishEventCommand(
                "engine_degraded",
                {
                    "flow": flow,
                    "backlog": total,
                    "per_flow": dict(tick.per_flow),
                    "growth_per_sample": (history[-1] - history[0]) / (len(history) - 1),
                },
            )
        )
    elif degraded and (total < limits.degraded_min_items or history[-1] < history[-2]):
        degraded = False
        commands.append(PublishEventCommand("engine_recovered", {"backlog": total}))
    return replace(state, backlog_history=history, degraded=degraded), commands


def _on_stop(state: EngineState) -> Result:
    nodes: dict[StreamKey, NodeState] = {}
    released: list[str] = []
    for stream, node in state.nodes.items():
        released.extend(item.entry_id for item in node.waiting)
        nodes[stream] = replace(node, waiting=(), retry_at=None)
    commands: list[Command] = [ReleaseCommand(tuple(released))] if released else []
    return replace(state, nodes=nodes, stopping=True), commands


def stream_counts(state: EngineState) -> Mapping[StreamKey, tuple[int, bool]]:
    """Per stream: items waiting in memory and whether one is running (for the API)."""
    return {s: (len(n.waiting), n.running is not None) for s, n in state.nodes.items()}
