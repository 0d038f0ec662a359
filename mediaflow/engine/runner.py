"""The async shell around the reducer: ticks in, commands out, effects performed.

One :class:`FlowRunner` executes one flow in this process. It owns the
reducer's state (private: read through :meth:`FlowRunner.snapshot` and the
named queries) and one part per seam:

* :mod:`.journal`: emissions, acks and latest values, committed in groups;
* :mod:`.execution`: one task per busy node, running the batches started;
* :mod:`.loops`: claim, commit, touch claims and leases, reclaim, sample the backlog;
* :mod:`.pins`: references saved and not yet durable (the GC horizon).

Every decision comes from :func:`~.reduce.reduce`: :meth:`FlowRunner._dispatch`
reduces a tick (synchronously, so no other coroutine interleaves between a
tick and its commands), records it when tracing (:mod:`.trace`) and applies
the commands. Two commands are answers its asker performs itself: the
claimer's ``ClaimCommand`` and the group commit's ``JournalCommand``.

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
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, assert_never

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
from mediaflow.engine.context import FlowEnv
from mediaflow.engine.events import EventBus, LatestThrottle
from mediaflow.engine.execution import NodeExecutor
from mediaflow.engine.heartbeat import Heartbeat
from mediaflow.engine.journal import Journal
from mediaflow.engine.lease_round import LeaseRound
from mediaflow.engine.loops import BackgroundLoops
from mediaflow.engine.nodeset import NodeSet
from mediaflow.engine.pins import Pins
from mediaflow.engine.reduce import reduce
from mediaflow.engine.reload import ReloadPlan
from mediaflow.engine.snapshot import FlowSnapshot
from mediaflow.engine.state import (
    EngineState,
    Limits,
    initial_state,
    is_settled,
    stream_counts,
)
from mediaflow.engine.state_store import StateStore
from mediaflow.engine.stats import LatencyWindow
from mediaflow.engine.ticks import (
    ControlAction,
    ControlTick,
    HaltTick,
    ItemsArrivedTick,
    ReshapeTick,
    StopTick,
    Tick,
    TimerTick,
)
from mediaflow.engine.trace import TraceWriter
from mediaflow.flows import FlowSpec
from mediaflow.live.hub import LiveHub
from mediaflow.node import Node
from mediaflow.queue.contract import QueueError, StreamKey, WorkItem, WorkQueue
from mediaflow.store import ArtifactStore

log = logging.getLogger("mediaflow.engine")

SOURCE_GRACE_S = 2.0
NODE_GRACE_S = 10.0


class FlowRunner:
    """Executes one flow against a queue and a store. Use through :mod:`.session`."""

    def __init__(
        self,
        spec: FlowSpec,
        *,
        queue: WorkQueue,
        store: ArtifactStore,
        consumer: str,
        settings: EngineSettings | None = None,
        bus: EventBus | None = None,
        live: LiveHub | None = None,
        state_store: StateStore | None = None,
        resumed: bool = False,
        trace: TraceWriter | None = None,
        with_sources: bool = True,
    ) -> None:
        """``with_sources`` False makes a worker: it runs the flow's other nodes
        on work the flow's run enqueues, and never sets up or starts a source."""
        self.spec = spec
        self.flow = spec.name
        self.consumer = consumer
        self.bus = bus or EventBus()
        self.live = live or LiveHub()
        self._queue = queue
        self._settings = settings or EngineSettings()
        self._with_sources = with_sources
        self._node_ids = _executed(spec, with_sources)
        streams = [StreamKey(spec.name, node_id) for node_id in self._node_ids]
        sources = [StreamKey(spec.name, n.id) for n in spec.sources() if with_sources]
        ordered = _ordered_streams(spec)
        self._state: EngineState = initial_state(
            Limits.from_settings(self._settings),
            streams,
            sources,
            resumed=resumed,
            ordered=ordered,
            rates=_rates(spec),
        )
        self._trace = trace
        self._pins = Pins()
        self._latency = LatencyWindow()
        # Live views: the journal offers each value once durable; snapshots read what was told.
        self._told = LatestThrottle(self.bus, spec.name)
        self._claim_wake = asyncio.Event()
        self._effects: set[asyncio.Task[Any]] = set()
        self._dead_letters = asyncio.Lock()
        dispatch = self._dispatch
        self.journal = Journal(
            spec,
            queue=queue,
            consumer=consumer,
            dispatch=dispatch,
            pins=self._pins,
            latest_events=self._told,
            yield_every=self._settings.turn_items,
        )
        self._env = FlowEnv(
            spec,
            journal=self.journal,
            store=store,
            pins=self._pins,
            bus=self.bus,
            live=self.live,
            is_stopping=self.is_stopping,
        )
        self._nodeset = NodeSet(self._env)
        self._executor = NodeExecutor(
            self._env,
            self._nodeset.instances,
            dispatch=dispatch,
            latency=self._latency,
            yield_every=self._settings.turn_items,
        )
        self._leases = LeaseRound(
            queue=queue,
            flow=self.flow,
            consumer=consumer,
            ttl_ms=self._settings.lease_ms,
            dispatch=dispatch,
            commit=self.journal.flush,
        )
        self.heartbeat = Heartbeat(self._env, state_store)
        self._loops = BackgroundLoops(
            self.flow,
            dispatch=dispatch,
            state=lambda: self._state,
            queue=queue,
            journal=self.journal,
            leases=self._leases,
            heartbeat=self.heartbeat,
            consumer=consumer,
            settings=self._settings,
            bus=self.bus,
            latency=self._latency,
            claim_wake=self._claim_wake,
        )

    # -- ticks in, commands out ------------------------------------------------------

    def _dispatch(self, tick: Tick) -> list[Command]:
        """Reduce ``tick`` and apply its commands; return the answers the caller
        performs itself (``ClaimCommand``, ``JournalCommand``). Never blocks."""
        now = asyncio.get_running_loop().time()
        self._state, commands = reduce(self._state, tick, now)
        if self._trace is not None:
            self._trace.record(tick, now, commands)
        answers: list[Command] = []
        for command in commands:
            self._apply(command, answers)
        return answers

    def _apply(self, command: Command, answers: list[Command]) -> None:
        match command:
            case StartNodeCommand():
                self._executor.start(command)
            case AckCommand(entry_ids=entry_ids):
                self.journal.ack(entry_ids)
            case RecallCommand(stream=stream):
                self._executor.recall(stream)
            case DeadLetterCommand(item=item, reason=reason):
                self._spawn(self._dead_letter(item, reason))
            case ReleaseCommand(entry_ids=ids, started=started):
                self._spawn(self._queue.release(list(ids), started=started))
            case WakeAtCommand(at=at):
                asyncio.get_running_loop().call_at(at, self._dispatch, TimerTick())
            case WakeClaimerCommand():
                self._claim_wake.set()
            case ClaimCommand() | JournalCommand() | LeaseCommand():
                answers.append(command)
            case PublishEventCommand(event_type=event_type, data=data):
                self.bus.publish(event_type, data)
            case _:
                assert_never(command)

    async def _dead_letter(self, item: WorkItem, reason: str) -> None:
        # One at a time, in the order decided: dead letters read back newest
        # first must be in the order the items died.
        async with self._dead_letters:
            await self._queue.dead_letter(item, reason)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run an effect in the background, keeping a reference and logging failures."""
        task = asyncio.create_task(coro)
        self._effects.add(task)
        task.add_done_callback(self._effect_done)

    def _effect_done(self, task: asyncio.Task[Any]) -> None:
        self._effects.discard(task)
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, QueueError):
            # Its items wait out their lease and come back; the outage is
            # reported once, with the loops'.
            self._loops.queue_failed("effect", exc)
        elif exc is not None:
            log.error("engine effect failed: %r", exc)

    # -- the run's life (for the session) -----------------------------------------------

    async def setup_nodes(self) -> None:
        """Build every node and call its ``setup``; on failure, tear down those set up."""
        self._nodeset.install(await self._nodeset.build(self.spec, self._node_ids))

    async def teardown_nodes(self) -> None:
        await self._nodeset.tear_down_all()

    async def reshape(self, plan: ReloadPlan) -> None:
        """Replace the flow's nodes as ``plan`` says (a reload). The flow is left
        paused (the caller resumes it, once the queue hands work out again).

        New instances are set up first: if one fails, nothing changed and the
        error propagates. Then intake pauses, changed and removed sources are
        told to end, running batches finish on the old nodes (sources within
        :data:`SOURCE_GRACE_S`), old instances are torn down, the new ones
        installed, emissions rewired and what waited in memory for a replaced
        node goes back to the queue for its successor."""
        new = plan.new
        executed = _executed(new, self._with_sources)
        built = await self._nodeset.build(new, (n for n in plan.rebuilt if n in executed))
        if self.flow not in self._state.paused:
            self._dispatch(ControlTick(self.flow, "pause"))
        halted = frozenset(StreamKey(self.flow, n) for n in plan.halted_sources)
        self._dispatch(HaltTick(halted))
        await self._executor.settle(halted, SOURCE_GRACE_S)
        await self._nodeset.retire(plan.retired)
        self.spec = new
        self._node_ids = [
            n for n, ns in new.nodes.items() if self._with_sources or not ns.is_source
        ]
        self._env.rewire(new)
        self.journal.rewire(new)
        self._executor.rewire()
        self._nodeset.install(built)
        streams = tuple(StreamKey(self.flow, n) for n in self._node_ids)
        self._dispatch(
            ReshapeTick(
                streams,
                frozenset(s for s in streams if new.nodes[s.node].is_source),
                frozenset(_ordered_streams(new)),
                frozenset(StreamKey(self.flow, n) for n in plan.changed),
                _rates(new),
            )
        )
        while self._effects:  # the lines handed back are back before anyone sweeps
            await asyncio.gather(*tuple(self._effects), return_exceptions=True)
        await self.journal.flush()

    def load_latest(self, values: Mapping[tuple[str, str], Any]) -> None:
        """Latest values recorded by earlier runs (a resumed source continues from them)."""
        self.journal.latest_values.update(values)
        self._told.remember(values)

    def start(self, run_id: str) -> None:
        """Start the loops (and the trace's segment): nodes are set up, ticks may come."""
        self._env.run_id = run_id
        if self._trace is not None:
            self._trace.start(self._state, run_id)
        self._loops.start()

    def admit(self, items: list[WorkItem]) -> None:
        """Items claimed for this process at enqueue (a run's source items)."""
        if items:
            self._dispatch(ItemsArrivedTick(tuple(items)))

    def control(self, action: ControlAction) -> None:
        """Pause, resume, step, disable or enable the flow (see :class:`ControlTick`)."""
        self._dispatch(ControlTick(self.flow, action))

    def is_stopping(self, node: str | None = None) -> bool:
        """Whether the run is stopping, or (``node``) that node was told to end."""
        state = self._state
        return state.stopping or (node is not None and StreamKey(self.flow, node) in state.halted)

    def is_idle(self) -> bool:
        """Nothing held in memory or known to wait on disk, nothing to commit, no
        effect in flight (the queue may still hold work other processes enqueued)."""
        return is_settled(self._state) and not self.journal.has_unflushed() and not self._effects

    async def stop(self) -> None:
        """Start nothing new, let running nodes finish (sources within
        :data:`SOURCE_GRACE_S`, the others within :data:`NODE_GRACE_S`, then
        cancelled), hand what waits back to the queue (with what a claim on its
        way brings), commit what is buffered and stop the loops. Raises
        :class:`~mediaflow.queue.contract.QueueError` if the last commit fails
        (the loops are stopped all the same)."""
        self._dispatch(StopTick())
        # Before the effects are awaited: a claim coming back now is handed back.
        await self._loops.claim_settled()
        for sources, grace in ((True, SOURCE_GRACE_S), (False, NODE_GRACE_S)):
            tasks = self._executor.tasks(sources=sources)
            if tasks:
                _, late = await asyncio.wait(tasks, timeout=grace)
                for task in late:
                    task.cancel()
        remaining = self._executor.tasks(sources=True) + self._executor.tasks(sources=False)
        if remaining:
            await asyncio.gather(*remaining, return_exceptions=True)
        while self._effects:
            await asyncio.gather(*tuple(self._effects), return_exceptions=True)
        try:
            await self.journal.flush()
            await self.journal.flush_latest()
        finally:
            # Also when the queue cannot take the last commit (a full disk): the
            # loops must not outlive the run; what was not committed is redelivered
            # when the run is resumed.
            await self._loops.stop()
            if self._state.ordered:
                await self._leases.leave()  # a failure is logged: the leases lapse
            if self._trace is not None:
                self._trace.close()

    # -- reading the run ---------------------------------------------------------------

    def snapshot(self) -> FlowSnapshot:
        state = self._state
        return FlowSnapshot(
            spec=self.spec,
            run_id=self._env.run_id,
            latest=dict(self.journal.latest_values),
            latest_ids=dict(self.journal.latest_ids),
            told=self._told.told(),
            lines=stream_counts(state),
            paused=self.flow in state.paused,
            stopping=state.stopping,
            disabled=self.flow in state.disabled,
            finished_items=self._executor.finished_items,
            started_items=dict(self._latency.totals),
        )

    def node(self, node_id: str) -> Node:
        """The instance running ``node_id`` (for tests and tools that inspect it)."""
        return self._nodeset.instances[node_id]

    def observe_latency(self, callback: Callable[[str, float], None]) -> None:
        """Call ``callback(node, seconds)`` for every emit-to-start latency recorded."""
        self._latency.add_observer(callback)

    def horizon(self) -> float:
        """The GC horizon of this run (see :mod:`.pins`): the earliest start of a
        save whose reference a node still holds unemitted, or now."""
        return self._pins.horizon(time.time())

    def pinned(self) -> int:
        """References saved by running nodes and not yet durable."""
        return len(self._pins)

    def has_unflushed(self) -> bool:
        return self.journal.has_unflushed()

    async def flush(self) -> None:
        await self.journal.flush()


def _ordered_streams(spec: FlowSpec) -> list[StreamKey]:
    """Streams of the nodes whose items must run in order, one executor at a time."""
    return [
        StreamKey(spec.name, n.id)
        for n in spec.nodes.values()
        if not n.is_source and n.node_class.ordered
    ]


def _executed(spec: FlowSpec, with_sources: bool) -> list[str]:
    """The nodes a runner executes: all, or a worker's, every one but the sources."""
    return [n for n, ns in spec.nodes.items() if with_sources or not ns.is_source]


def _rates(spec: FlowSpec) -> dict[StreamKey, float]:
    """The least seconds between two runs of each rate-limited node (``max_rate``)."""
    return {
        StreamKey(spec.name, n.id): 1.0 / n.max_rate
        for n in spec.nodes.values()
        if n.max_rate is not None
    }
