"""The async shell around the reducer: ticks in, commands out, effects performed.

One :class:`FlowRunner` executes one flow in this process. It owns the
reducer's state (private: read through :meth:`FlowRunner.snapshot` and the
named queries), its one :meth:`~FlowRunner._dispatch` and the parts that
perform what the reducer decides (:mod:`.lifecycle` wires them, one per seam):

* :mod:`.journal`: emissions, acks and latest values, committed in groups;
* :mod:`.execution`: one task per busy node, running the batches started;
* :mod:`.loops`: claim, commit, touch claims and leases, reclaim, sample the
  backlog; :mod:`.lease_round` and :mod:`.heartbeat` ride the touch loop;
* :mod:`.effects`: dead letters and releases in flight;
* :mod:`.pins`: references saved and not yet durable (the GC horizon).

Every decision comes from :func:`~.reduce.reduce`: :meth:`FlowRunner._dispatch`
reduces a tick (synchronously, so no other coroutine interleaves between a
tick and its commands), records it when tracing (:mod:`.trace`) and applies
the commands. Each part builds its own ticks and hands them to that dispatch;
three commands are answers its asker performs itself: the claimer's
``ClaimCommand``, the group commit's ``JournalCommand`` and the lease round's
``LeaseCommand``. The run's life (set up, start, reshape, stop) is
:attr:`FlowRunner.life` (:mod:`.lifecycle`).

Every hand-off in memory is bounded, each with its policy:

* a node's line: ``EngineSettings.node_buffer`` items (one after a crash);
  beyond it work waits on disk (*block at the queue*);
* the journal's outbox: :data:`~.journal.OUTBOX_LIMIT` emissions (*block the
  producer*); pending acks: at most the items held;
* GC pins: one per reference a running node saved and has not emitted;
* event subscribers: a ring per reader (*drop oldest*, counted);
* ``latest`` events: :class:`~.events.LatestThrottle` (*keep newest*);
* latency samples: :class:`~.stats.LatencyWindow` (*keep newest*).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import assert_never

from mediaflow.config import EngineSettings
from mediaflow.engine.commands import (
    AckCommand,
    ClaimCommand,
    Command,
    DeadLetterCommand,
    JournalCommand,
    LeaseCommand,
    PublishEventCommand,
    RecallCommand,
    ReleaseCommand,
    StartNodeCommand,
    WakeAtCommand,
    WakeClaimerCommand,
)
from mediaflow.engine.events import EventBus
from mediaflow.engine.lifecycle import (
    Role,
    RunLife,
    executed,
    ordered_streams,
    rates,
    retries,
    wire,
)
from mediaflow.engine.operate import FlowControls
from mediaflow.engine.queue_roles import EngineQueue
from mediaflow.engine.reduce import reduce
from mediaflow.engine.services import Services
from mediaflow.engine.snapshot import FlowSnapshot
from mediaflow.engine.state import EngineState, Limits, initial_state, is_settled, stream_counts
from mediaflow.engine.state_store import StateStore
from mediaflow.engine.ticks import ControlAction, ControlTick, ItemsArrivedTick, Tick, TimerTick
from mediaflow.engine.trace import TraceWriter
from mediaflow.flows import FlowSpec
from mediaflow.live.hub import LiveHub
from mediaflow.node import Node
from mediaflow.queue.contract import StreamKey, WorkItem
from mediaflow.store import ArtifactStore


class FlowRunner:
    """Executes one flow against a queue and a store. Use through :mod:`.session`."""

    def __init__(
        self,
        spec: FlowSpec,
        *,
        queue: EngineQueue,
        store: ArtifactStore,
        consumer: str,
        services: Services,
        controls: FlowControls | None = None,
        settings: EngineSettings | None = None,
        bus: EventBus | None = None,
        live: LiveHub | None = None,
        state_store: StateStore | None = None,
        resumed: bool = False,
        trace: TraceWriter | None = None,
        role: Role = "run",
    ) -> None:
        """``role`` "worker" makes a worker: it runs the flow's other nodes on work
        the flow's run enqueues, and never sets up or starts a source; "edge" runs
        only the sources and the nodes marked ``edge`` (see :data:`Role`).
        ``services``: what its nodes share (``ctx.more.shared``), closed by the caller;
        ``controls``: the session's, for ``ctx.more.control``."""
        self.flow = spec.name
        self.consumer = consumer
        self.bus = bus or EventBus()
        self.live = live or LiveHub()
        settings = settings or EngineSettings()
        node_ids = executed(spec, role)
        streams = [StreamKey(spec.name, node_id) for node_id in node_ids]
        sources = [StreamKey(spec.name, n.id) for n in spec.sources() if n.id in node_ids]
        self._state: EngineState = initial_state(
            Limits.from_settings(settings),
            streams,
            sources,
            resumed=resumed,
            ordered=ordered_streams(spec, node_ids),
            rates=rates(spec),
            retries=retries(spec),
        )
        self._trace = trace
        parts = self._parts = wire(
            spec,
            dispatch=self._dispatch,
            state=lambda: self._state,
            is_stopping=self.is_stopping,
            queue=queue,
            store=store,
            consumer=consumer,
            settings=settings,
            bus=self.bus,
            live=self.live,
            services=services,
            controls=controls,
            state_store=state_store,
        )
        self.journal = parts.journal
        self.heartbeat = parts.heartbeat
        self.life = RunLife(
            parts,
            dispatch=self._dispatch,
            state=lambda: self._state,
            trace=trace,
            role=role,
        )

    # -- ticks in, commands out ------------------------------------------------------

    def _dispatch(self, tick: Tick) -> list[Command]:
        """Reduce ``tick`` and apply its commands; return the answers the caller
        performs itself (``ClaimCommand``, ``JournalCommand``, ``LeaseCommand``).
        Never blocks."""
        now = asyncio.get_running_loop().time()
        self._state, commands = reduce(self._state, tick, now)
        if self._trace is not None:
            self._trace.record(tick, now, commands)
        answers: list[Command] = []
        for command in commands:
            self._apply(command, answers)
        return answers

    def _apply(self, command: Command, answers: list[Command]) -> None:
        parts = self._parts
        match command:
            case StartNodeCommand():
                parts.executor.start(command)
            case AckCommand(entry_ids=entry_ids):
                parts.journal.ack(entry_ids)
            case RecallCommand(stream=stream):
                parts.executor.recall(stream)
            case DeadLetterCommand(item=item, reason=reason):
                parts.effects.dead_letter(item, reason)
            case ReleaseCommand(entry_ids=ids, started=started):
                parts.effects.release(ids, started=started)
            case WakeAtCommand(at=at):
                asyncio.get_running_loop().call_at(at, self._dispatch, TimerTick())
            case WakeClaimerCommand():
                parts.claim_wake.set()
            case ClaimCommand() | JournalCommand() | LeaseCommand():
                answers.append(command)
            case PublishEventCommand(event_type=event_type, data=data):
                self.bus.publish(event_type, data)
            case _:
                assert_never(command)

    # -- what the session asks of the flow ---------------------------------------------

    def admit(self, items: list[WorkItem]) -> None:
        """Items claimed for this process at enqueue (a run's source items)."""
        if items:
            self._dispatch(ItemsArrivedTick(tuple(items)))

    def control(self, action: ControlAction) -> None:
        """Pause, resume, step, disable or enable the flow (see :class:`ControlTick`)."""
        self._dispatch(ControlTick(self.flow, action))

    # -- reading the run ---------------------------------------------------------------

    @property
    def spec(self) -> FlowSpec:
        """The flow as it runs now (a reload replaces it)."""
        return self._parts.env.spec

    def is_stopping(self, node: str | None = None) -> bool:
        """Whether the run is stopping, or (``node``) that node was told to end."""
        state = self._state
        if state.stopping or node is None:
            return state.stopping
        stream = state.nodes.get(StreamKey(self.flow, node))
        return stream is not None and stream.halted

    def is_idle(self) -> bool:
        """Nothing held in memory or known to wait on disk, nothing to commit, no
        effect in flight (the queue may still hold work other processes enqueued)."""
        parts = self._parts
        return is_settled(self._state) and not parts.journal.has_unflushed() and not parts.effects

    def snapshot(self) -> FlowSnapshot:
        state, parts = self._state, self._parts
        return FlowSnapshot(
            spec=parts.env.spec,
            run_id=parts.env.run_id,
            latest=dict(parts.journal.latest_values),
            latest_ids=dict(parts.journal.latest_ids),
            told=parts.told.told(),
            lines=stream_counts(state),
            paused=self.flow in state.paused,
            stopping=state.stopping,
            disabled=self.flow in state.disabled,
            finished_items=parts.executor.finished_items,
            failed_sources=dict(parts.executor.failed_sources),
            started_items=dict(parts.latency.totals),
        )

    def node(self, node_id: str) -> Node:
        """The instance running ``node_id`` (for tests and tools that inspect it)."""
        return self._parts.nodeset.instances[node_id]

    def observe_latency(self, callback: Callable[[str, float], None]) -> None:
        """Call ``callback(node, seconds)`` for every emit-to-start latency recorded."""
        self._parts.latency.add_observer(callback)

    def horizon(self) -> float:
        """The GC horizon of this run (see :mod:`.pins`): the earliest start of a
        save whose reference a node still holds unemitted, or now."""
        return self._parts.env.pins.horizon(time.time())

    def pinned(self) -> int:
        """References saved by running nodes and not yet durable."""
        return len(self._parts.env.pins)

    def has_unflushed(self) -> bool:
        return self._parts.journal.has_unflushed()
