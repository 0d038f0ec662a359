"""The scheduling core: ``reduce(state, tick, now) -> (state, commands)``.

Pure: no I/O, no clock, no randomness. Everything the runner does follows
from the commands returned here, so the rules live in one place, are tested
as tables (``tests/test_reduce.py``) and replay exactly (:mod:`.trace`):

* admission (:mod:`.admission`): what to claim from disk and how many of a
  group commit's new emissions to claim at once, within each node's bounded
  line, never overtaking older work on disk;
* routing: an arrived item joins its node's waiting line, ordered by ``seq``;
* ordering per edge: a node runs one batch at a time, its items oldest first,
  so chunks reach it in the order they were emitted however many are in flight;
* retry: a node that raises is re-run after a doubling backoff while its later
  items wait behind it; after ``max_attempts`` (the engine's, or the node's own
  :class:`~mediaflow.node.RetryPolicy`) the item is dead-lettered with a
  ``cascade_dropped`` event (:mod:`.reports` builds the events), at once if the
  node said no retry can help (:class:`~mediaflow.node.ItemRefused`); a run that
  failed only because the store or the queue was away costs no attempt and is
  never dead-lettered for it (:mod:`.away`); ``max_deliveries``: an item the
  queue delivered too often (it crashed the process each time) is dead-lettered
  on arrival;
* flow control and health (pause, step, stop, the backlog): :mod:`.control`;
* sharing ordered streams with the flow's other executors: :mod:`.leasing`.

A tick's path from arrival to ``StartNodeCommand`` reads top to bottom:
:func:`reduce` -> ``_on_committed`` / ``_on_claimed`` -> :func:`admit` ->
:func:`start_ready` -> ``_next_batch``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from itertools import pairwise
from typing import assert_never

from mediaflow.engine import admission, control, leasing, rates, reports
from mediaflow.engine.commands import (
    AckCommand,
    Command,
    ReleaseCommand,
    StartNodeCommand,
    WakeAtCommand,
    WakeClaimerCommand,
)
from mediaflow.engine.state import EngineState, StreamState, backoff_s, retry_of, with_streams
from mediaflow.engine.ticks import (
    BacklogBehindTick,
    BacklogSampledTick,
    ClaimDueTick,
    ClaimedTick,
    ClaimFailedTick,
    CommitDueTick,
    CommitFailedTick,
    CommittedTick,
    ControlTick,
    HaltTick,
    ItemsArrivedTick,
    LeasedTick,
    LeaseDueTick,
    NodeFinishedTick,
    ReshapeTick,
    StopTick,
    Tick,
    TimerTick,
)
from mediaflow.queue.contract import StreamKey, WorkItem

Result = tuple[EngineState, list[Command]]


def reduce(state: EngineState, tick: Tick, now: float) -> Result:
    """Apply one tick. ``now`` is monotonic seconds, used for backoff deadlines."""
    match tick:
        case CommittedTick(items=items):
            return _on_committed(state, items, now)
        case ClaimedTick(items=items):
            return _on_claimed(state, items, now)
        case ItemsArrivedTick(items=items):
            return admit(state, items, now, [])
        case NodeFinishedTick():
            return _on_node_finished(state, tick, now)
        case CommitDueTick(counts=counts):
            return admission.on_commit_due(state, counts)
        case CommitFailedTick():
            return with_streams(state, state.reserved, reserved=0), []
        case ClaimDueTick(poll=poll):
            return admission.on_claim_due(state, poll)
        case ClaimFailedTick():
            return replace(state, claim=None), []
        case BacklogBehindTick(streams=streams):
            return control.mark_behind(state, streams), [WakeClaimerCommand()]
        case TimerTick():
            started, commands = start_ready(state, state.nodes.keys(), now, [])
            return started, commands + _rearm(started, now)
        case BacklogSampledTick():
            return control.on_backlog_sampled(state, tick)
        case ControlTick():
            changed, commands, may_start = control.on_control(state, tick)
            if not may_start:
                return changed, commands
            return start_ready(changed, changed.nodes.keys(), now, commands)
        case HaltTick(streams=streams):
            return control.on_halt(state, streams)
        case ReshapeTick():
            return control.on_reshape(state, tick)
        case LeaseDueTick():
            return leasing.on_lease_due(state, tick)
        case LeasedTick():
            return leasing.on_leased(state, tick)
        case StopTick():
            return control.on_stop(state)
        case _:
            assert_never(tick)


# -- work arriving ---------------------------------------------------------------------


def _on_committed(state: EngineState, items: tuple[WorkItem, ...], now: float) -> Result:
    """The group commit landed with ``items`` claimed for us. A stream the queue
    claimed fewer for than we reserved has older work on disk: it is behind."""
    got = _count_by_stream(items)
    reserved = [s for s, node in state.nodes.items() if node.reserved]
    refused = frozenset(s for s in reserved if got.get(s, 0) < state.nodes[s].reserved)
    state = with_streams(state, reserved, reserved=0)
    commands: list[Command] = []
    if refused:
        state = control.mark_behind(state, refused)
        commands.append(WakeClaimerCommand())
    return admit(state, items, now, commands)


def _on_claimed(state: EngineState, items: tuple[WorkItem, ...], now: float) -> Result:
    """A claim came back. A stream that got fewer than asked, with nothing left on
    disk for it since the claim was asked, is caught up (and no longer careful)."""
    claim = state.claim
    if claim is not None:
        got = _count_by_stream(items)
        drained = [
            stream
            for stream, (asked, mark) in claim.asked.items()
            if got.get(stream, 0) < asked
            and stream in state.nodes
            and state.nodes[stream].behind_mark == mark
            # A paused flow's claims come back empty whatever waits on disk.
            and stream.flow not in state.paused
        ]
        state = with_streams(replace(state, claim=None), drained, caught_up=True, careful=False)
    return admit(state, items, now, [])


def admit(
    state: EngineState, items: Iterable[WorkItem], now: float, commands: list[Command]
) -> Result:
    """Route arrived items to their nodes' lines, then start what may start."""
    arrivals: dict[StreamKey, list[WorkItem]] = {}
    released: list[str] = []
    limits = state.limits
    for item in items:
        node = state.nodes.get(item.stream)
        if node is None:
            reason = f"no node {item.stream.node!r} in flow {item.stream.flow!r} to run it"
            commands.extend(reports.dropped(item, reason, 0))
        elif state.stopping:
            released.append(item.entry_id)
        elif _lease_lost(node):
            # Claimed just before the lease was lost: the new holder takes it
            # (see leasing._forget_lines).
            continue
        elif item.deliveries > 1 and node.holds(item.entry_id):
            # Claimed again after our lease lapsed: we already have it in line.
            # (Only a redelivery can be a duplicate; the check is a scan.)
            continue
        elif item.deliveries > limits.max_deliveries and not node.is_source:
            # Sources are resumed, never dead-lettered: their item is redelivered
            # whenever any crash ends the process, whoever caused it.
            reason = (
                f"delivered {item.deliveries} times "
                f"(MEDIAFLOW_MAX_DELIVERIES={limits.max_deliveries})"
            )
            commands.extend(reports.dropped(item, reason, 0))
        else:
            arrivals.setdefault(item.stream, []).append(item)
    if released:
        commands.append(ReleaseCommand(tuple(released)))
    if not arrivals:
        return state, commands
    nodes = dict(state.nodes)
    for stream, new in arrivals.items():
        node = nodes[stream]
        nodes[stream] = replace(node, waiting=_merge_by_seq(node.waiting, new))
    return start_ready(replace(state, nodes=nodes), arrivals, now, commands)


def _lease_lost(node: StreamState) -> bool:
    """Whether the stream belongs to an ordered node whose lease this process lacks."""
    return node.ordered and not node.leased


def _merge_by_seq(line: tuple[WorkItem, ...], new: list[WorkItem]) -> tuple[WorkItem, ...]:
    # Claims arrive in seq order, so the common case appends; a redelivered
    # item (lower seq) slots in front of younger ones.
    if (not line or line[-1].seq <= new[0].seq) and all(a.seq <= b.seq for a, b in pairwise(new)):
        return (*line, *new)
    return tuple(sorted((*line, *new), key=lambda item: item.seq))


# -- starting work ---------------------------------------------------------------------


def start_ready(
    state: EngineState, streams: Iterable[StreamKey], now: float, commands: list[Command]
) -> Result:
    """Start a batch on every node of ``streams`` that is idle with work waiting.

    Oldest head first (a single step goes to the work that waited longest); ties
    broken by id and stream so the same ticks always give the same commands. A
    paused flow's nodes start only what its steps allow, one item per step.
    """
    if state.stopping:
        return state, commands
    nodes = state.nodes
    candidates = [s for s in streams if _can_start(nodes[s], now)]
    if not candidates:
        return state, commands
    if len(candidates) > 1:
        candidates.sort(
            key=lambda s: (nodes[s].waiting[0].enqueued_at, nodes[s].waiting[0].entry_id, s)
        )
    nodes = dict(nodes)
    steps = state.steps
    for stream in candidates:
        node = nodes[stream]
        stepping = stream.flow in state.paused and not node.is_source
        if stepping:
            if steps.get(stream.flow, 0) <= 0:
                continue
            steps = {**steps, stream.flow: steps[stream.flow] - 1}
        if node.interval is not None and not stepping and node.retry_at is None:
            node = rates.open_window(stream, node, now, commands)
        batch = _next_batch(node, single=stepping)
        if stepping:
            commands.append(reports.stepped_event(batch[0]))
        attempt = node.attempt + 1 if node.retry_at is not None else 1
        # After a crash, acks are made durable before each item starts, so if
        # it kills the process again only it is delivered once more
        # (MAX_DELIVERIES counts attempts, not acks lost with the process).
        commit_first = batch[0].deliveries > 1 or node.careful
        nodes[stream] = replace(
            node,
            waiting=node.waiting[len(batch) :],
            running=batch,
            attempt=attempt,
            retry_at=None,
            recalled=False,
        )
        commands.append(StartNodeCommand(stream, batch, attempt, commit_first))
    return replace(state, nodes=nodes, steps=steps), commands


def _rearm(state: EngineState, now: float) -> list[Command]:
    """The timer again for the nearest deadline still ahead (a retry's backoff, a
    rate window): an event loop may run a timer up to its clock's resolution
    early, and the tick it sends then starts nothing and sets no new timer, so
    without this a source's restart could wait for ever."""
    ahead = [
        deadline
        for node in state.nodes.values()
        if node.waiting and not node.running and not node.halted
        for deadline in (node.retry_at, node.gate)
        if deadline is not None and deadline > now
    ]
    return [WakeAtCommand(min(ahead))] if ahead else []


def _can_start(node: StreamState, now: float) -> bool:
    if node.running or not node.waiting or node.halted:
        return False
    if node.gate is not None and node.gate > now:
        return False
    return node.retry_at is None or node.retry_at <= now


def _next_batch(node: StreamState, *, single: bool) -> tuple[WorkItem, ...]:
    """The waiting items the node runs next, in one task: every first delivery at
    the head of its line. A retry, a redelivery, a careful stream, a step and a
    source run alone."""
    waiting = node.waiting
    if (
        single
        or node.is_source
        or node.retry_at is not None
        or waiting[0].deliveries > 1
        or node.careful
    ):
        return waiting[:1]
    n = 1
    while n < len(waiting) and waiting[n].deliveries == 1:
        n += 1
    return waiting[:n]


# -- work finishing --------------------------------------------------------------------


def _on_node_finished(state: EngineState, tick: NodeFinishedTick, now: float) -> Result:
    """Ack what the batch finished; retry, dead-letter or release what failed;
    put what it never started back at the head of the line; start the next."""
    stream = tick.stream
    node = state.nodes.get(stream)
    if node is None or not node.running or node.running[0].entry_id != tick.entry_id:
        return state, []
    batch = node.running
    done = min(max(tick.done, 0), len(batch))
    commands: list[Command] = []
    if done and node.halted:
        # A source told to end (disable, reload) hands its item back: started
        # again, it resumes where it was rather than being over.
        ids = tuple(item.entry_id for item in batch[:done])
        commands.append(ReleaseCommand(ids, started=True))
        state = control.mark_behind(state, frozenset({stream}))
        node = state.nodes[stream]
    elif done:
        commands.append(AckCommand(tuple(item.entry_id for item in batch[:done])))
    unstarted = batch[done:]
    attempt, retry_at, away = 0, None, 0
    if tick.error is not None and unstarted:
        failed, unstarted = unstarted[0], unstarted[1:]
        attempt = node.attempt if done == 0 else 1
        if state.stopping:
            # Shutting down: leave the item for the next run instead of burning attempts.
            commands.append(ReleaseCommand((failed.entry_id,), started=True))
            attempt = 0
        elif tick.away is not None:
            # Not the item's failure (the store or the queue is away): it runs again
            # after a wait that grows, counting this attempt again, and is never
            # dead-lettered for it.
            away = node.away + 1 if done == 0 else 1
            retry_at = now + backoff_s(state.limits, away)
            unstarted = (failed, *unstarted)
            commands.append(WakeAtCommand(retry_at))
            commands.append(
                reports.retry_event(failed, attempt, retry_at - now, tick.error, away=tick.away)
            )
            attempt -= 1
        elif tick.refused or attempt >= retry_of(state.limits, node).max_attempts:
            commands.extend(reports.dropped(failed, tick.error, attempt))
            attempt = 0
        else:
            retry_at = now + backoff_s(retry_of(state.limits, node), attempt)
            unstarted = (failed, *unstarted)
            commands.append(WakeAtCommand(retry_at))
            commands.append(reports.retry_event(failed, attempt, retry_at - now, tick.error))
    waiting = (*unstarted, *node.waiting) if unstarted else node.waiting
    if waiting and _lease_lost(node):
        # Lost while the batch ran (leasing._forget_lines): the new holder runs the rest.
        waiting, attempt, retry_at = (), 0, None
    if state.stopping and waiting:
        commands.append(ReleaseCommand(tuple(item.entry_id for item in waiting)))
        waiting = ()
    finished = replace(
        node,
        waiting=waiting,
        running=(),
        attempt=attempt,
        retry_at=retry_at,
        away=away,
        recalled=False,
    )
    nodes = {**state.nodes, stream: finished}
    if not node.caught_up:
        # Room freed in a line whose work waits on disk: the claimer may fetch.
        commands.append(WakeClaimerCommand())
    return start_ready(replace(state, nodes=nodes), (stream,), now, commands)


def _count_by_stream(items: Iterable[WorkItem]) -> dict[StreamKey, int]:
    counts: dict[StreamKey, int] = {}
    for item in items:
        counts[item.stream] = counts.get(item.stream, 0) + 1
    return counts
