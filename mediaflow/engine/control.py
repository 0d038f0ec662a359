"""The reducer's rules for flow control and health, pure like :mod:`.reduce`.

* pause/step: a paused flow starts nothing until resumed, except one item per
  step; its running batches are recalled after their current item; sources
  keep running so nothing is lost while paused;
* disable/enable: a disabled flow is paused and its sources are told to end
  (``ctx.stopping()``); a source that returns hands its item back, so enabling
  claims it again and the source resumes where it was;
* stop: nothing new starts, what waits in memory goes back to the queue and
  running batches end after their current item;
* backlog: a total that grows over ``degraded_samples`` samples raises
  ``engine_degraded`` naming the flow most of the work belongs to;
* behind: work of a stream left on disk makes it claimed, not taken at enqueue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise
from typing import Any

from mediaflow.engine.commands import (
    Command,
    PublishEventCommand,
    RecallCommand,
    ReleaseCommand,
    WakeClaimerCommand,
)
from mediaflow.engine.state import EngineState, StreamState, with_streams
from mediaflow.engine.ticks import BacklogSampledTick, ControlTick, ReshapeTick
from mediaflow.queue.contract import StreamKey

Result = tuple[EngineState, list[Command]]


def mark_behind(state: EngineState, streams: frozenset[StreamKey]) -> EngineState:
    """Work for ``streams`` waits on disk: claim it before taking new work at enqueue."""
    nodes = dict(state.nodes)
    for stream in streams:
        node = nodes.get(stream)
        if node is not None:
            nodes[stream] = replace(node, behind_mark=node.behind_mark + 1, caught_up=False)
    return replace(state, nodes=nodes)


def on_control(state: EngineState, tick: ControlTick) -> tuple[EngineState, list[Command], bool]:
    """The state and commands after ``tick``, and whether items may now start
    (after ``resume``, ``step`` and ``enable``)."""
    flow = tick.flow
    match tick.action:
        case "pause":
            return *on_pause(state, flow), False
        case "disable":
            return *on_disable(state, flow), False
        case "resume":
            return *on_resume(state, flow), True
        case "step":
            return *on_step(state, flow), True
        case "enable":
            enabled, commands = on_enable(state, flow)
            resumed, more = on_resume(enabled, flow)
            return resumed, [*commands, *more], True


def on_pause(state: EngineState, flow: str) -> Result:
    nodes, commands = _recall(state, lambda stream: stream.flow == flow)
    for stream, node in nodes.items():
        if stream.flow == flow and node.caught_up:
            # Work waits on disk while paused: nothing of the flow is caught up.
            nodes[stream] = replace(node, caught_up=False)
    commands.append(PublishEventCommand("flow_paused", {"flow": flow}))
    return replace(state, nodes=nodes, paused=state.paused | {flow}), commands


def on_resume(state: EngineState, flow: str) -> Result:
    """The caller starts what may start (:func:`~.reduce.start_ready`)."""
    steps = {f: n for f, n in state.steps.items() if f != flow}
    resumed = replace(state, paused=state.paused - {flow}, steps=steps)
    return resumed, [PublishEventCommand("flow_resumed", {"flow": flow})]


def on_step(state: EngineState, flow: str) -> Result:
    """One more item of a paused flow may start (the caller starts it); the
    claimer may fetch it (the queue lets one more through)."""
    if flow not in state.paused:
        return state, []
    steps = {**state.steps, flow: state.steps.get(flow, 0) + 1}
    return replace(state, steps=steps), [WakeClaimerCommand()]


def on_disable(state: EngineState, flow: str) -> Result:
    """Pause ``flow`` and halt its sources: one that runs ends when it next looks
    at ``ctx.stopping()``, one waiting in memory goes back to the queue now."""
    if flow in state.disabled:
        return state, []
    state, commands = on_pause(state, flow) if flow not in state.paused else (state, [])
    sources = frozenset(s for s, n in state.nodes.items() if n.is_source and s.flow == flow)
    state, released = _halt(state, sources)
    commands.extend(released)
    commands.append(PublishEventCommand("flow_disabled", {"flow": flow}))
    return replace(state, disabled=state.disabled | {flow}), commands


def on_enable(state: EngineState, flow: str) -> Result:
    """Undo :func:`on_disable`; the caller resumes the flow (:func:`on_resume`)
    and the claimer fetches the sources' items again."""
    if flow not in state.disabled:
        return state, []
    halted = frozenset(s for s, n in state.nodes.items() if n.halted and s.flow == flow)
    enabled = with_streams(state, halted, halted=False)
    enabled = mark_behind(replace(enabled, disabled=state.disabled - {flow}), halted)
    return enabled, [
        PublishEventCommand("flow_enabled", {"flow": flow}),
        WakeClaimerCommand(),
    ]


def on_halt(state: EngineState, streams: frozenset[StreamKey]) -> Result:
    """Tell the sources of ``streams`` to end (:class:`~.ticks.HaltTick`)."""
    sources = frozenset(s for s in streams if s in state.nodes and state.nodes[s].is_source)
    return _halt(state, sources)


def _halt(state: EngineState, sources: frozenset[StreamKey]) -> Result:
    """Halt ``sources``: what waits in their lines goes back to the queue unstarted."""
    nodes = dict(state.nodes)
    released: list[str] = []
    for stream in sources:
        node = nodes[stream]
        released.extend(item.entry_id for item in node.waiting)
        nodes[stream] = replace(node, waiting=(), retry_at=None, halted=True, caught_up=False)
    commands: list[Command] = []
    if released:
        commands.append(ReleaseCommand(tuple(released), started=False))
    return replace(state, nodes=nodes), commands


def on_reshape(state: EngineState, tick: ReshapeTick) -> Result:
    """The flow's nodes changed (a reload; their tasks have finished): new and
    rebuilt streams start empty and behind, the lines of rebuilt and removed
    ones go back to the queue, a rebuilt halted source may start again."""
    streams = frozenset(tick.streams)
    ordered = tick.ordered - tick.sources
    nodes: dict[StreamKey, StreamState] = {}
    released: list[str] = []
    for stream in tick.streams:
        before = state.nodes.get(stream)
        shape: dict[str, Any] = {
            "ordered": stream in ordered,
            "leased": before is not None and before.leased and stream in ordered,
            "draining": before is not None and before.draining and stream in ordered,
            "interval": tick.rates.get(stream),
            "retry": tick.retries.get(stream),
        }
        if before is not None and stream not in tick.rebuilt:
            nodes[stream] = replace(before, **shape)
            continue
        if before is not None:
            released.extend(item.entry_id for item in before.waiting)
        mark = before.behind_mark if before is not None else 0
        nodes[stream] = StreamState(is_source=stream in tick.sources, behind_mark=mark, **shape)
    for stream, before in state.nodes.items():
        if stream not in streams:
            released.extend(item.entry_id for item in before.waiting)
    commands: list[Command] = []
    if released:
        commands.append(ReleaseCommand(tuple(released), started=False))
    commands.append(WakeClaimerCommand())
    return replace(state, nodes=nodes), commands


def on_stop(state: EngineState) -> Result:
    nodes, commands = _recall(state, lambda _stream: True)
    released: list[str] = []
    for stream, node in nodes.items():
        released.extend(item.entry_id for item in node.waiting)
        nodes[stream] = replace(node, waiting=(), retry_at=None)
    if released:
        commands.insert(0, ReleaseCommand(tuple(released)))
    return replace(state, nodes=nodes, stopping=True), commands


def _recall(
    state: EngineState, matches: Callable[[StreamKey], bool]
) -> tuple[dict[StreamKey, StreamState], list[Command]]:
    """Recall the running batches (of more than one item, not sources) of the
    streams ``matches`` selects: each ends after its current item."""
    nodes = dict(state.nodes)
    commands: list[Command] = []
    for stream, node in state.nodes.items():
        if len(node.running) > 1 and not node.recalled and not node.is_source and matches(stream):
            nodes[stream] = replace(node, recalled=True)
            commands.append(RecallCommand(stream))
    return nodes, commands


def on_backlog_sampled(state: EngineState, tick: BacklogSampledTick) -> Result:
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
