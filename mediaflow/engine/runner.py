"""The async shell around the reducer: ticks in, commands out, effects performed.

One :class:`FlowRunner` executes one flow in this process. It owns the
reducer's state (private: read through :meth:`FlowRunner.snapshot` and the
named queries) and one part per seam:

* :mod:`.journal`: emissions, acks and latest values, committed in groups;
* :mod:`.execution`: one task per busy node, running the batches started;
* :mod:`.loops`: claim, commit, touch leases, reclaim, sample the backlog;
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
from typing import Any, TextIO, assert_never

from mediaflow.config import EngineSettings
from mediaflow.engine.commands import (
    AckCommand,
    ClaimCommand,
    Command,
    DeadLetterCommand,
    JournalCommand,
    PublishEventCommand,
    RecallCommand,
    ReleaseCommand,
    StartNodeCommand,
    WakeAtCommand,
    WakeClaimerCommand,
)
from mediaflow.engine.context import FlowEnv, RunContext
from mediaflow.engine.events import EventBus, LatestThrottle
from mediaflow.engine.execution import NodeExecutor
from mediaflow.engine.journal import Journal
from mediaflow.engine.loops import BackgroundLoops
from mediaflow.engine.pins import Pins
from mediaflow.engine.reduce import reduce
from mediaflow.engine.snapshot import FlowSnapshot
from mediaflow.engine.state import (
    EngineState,
    Limits,
    held_ids,
    initial_state,
    is_settled,
    stream_counts,
)
from mediaflow.engine.state_store import StateStore
from mediaflow.engine.stats import LatencyWindow
from mediaflow.engine.ticks import (
    BacklogBehindTick,
    BacklogSampledTick,
    ClaimDueTick,
    ClaimedTick,
    ClaimFailedTick,
    CommitDueTick,
    CommitFailedTick,
    CommittedTick,
    ItemsArrivedTick,
    PauseTick,
    ResumeTick,
    StepTick,
    StopTick,
    Tick,
    TimerTick,
)
from mediaflow.engine.trace import TraceWriter
from mediaflow.flows import FlowSpec
from mediaflow.node import Node
from mediaflow.queue.contract import StreamKey, WorkItem, WorkQueue
from mediaflow.store import ArtifactStore, use_store

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
        jsonl: TextIO | None = None,
        state_store: StateStore | None = None,
        resumed: bool = False,
        trace: TraceWriter | None = None,
    ) -> None:
        self.spec = spec
        self.flow = spec.name
        self.consumer = consumer
        self.bus = bus or EventBus()
        self._queue = queue
        self._state_store = state_store
        self._settings = settings or EngineSettings()
        streams = [StreamKey(spec.name, node_id) for node_id in spec.nodes]
        sources = [StreamKey(spec.name, n.id) for n in spec.sources()]
        self._state: EngineState = initial_state(
            Limits.from_settings(self._settings), streams, sources, resumed=resumed
        )
        self._trace = trace
        self._pins = Pins()
        self._latency = LatencyWindow()
        self._journal = Journal(
            spec,
            queue=queue,
            consumer=consumer,
            scheduler=self,
            pins=self._pins,
            latest_events=LatestThrottle(self.bus, spec.name),
            yield_every=self._settings.turn_items,
            jsonl=jsonl,
        )
        self._env = FlowEnv(
            spec,
            journal=self._journal,
            store=store,
            pins=self._pins,
            bus=self.bus,
            is_stopping=self.is_stopping,
        )
        self._nodes: dict[str, Node] = {}
        self._executor = NodeExecutor(
            self._env,
            self._nodes,
            report=self._dispatch,
            commit=self._journal.flush,
            latency=self._latency,
            yield_every=self._settings.turn_items,
        )
        self._claim_wake = asyncio.Event()
        self._loops = BackgroundLoops(
            self,
            queue=queue,
            journal=self._journal,
            consumer=consumer,
            settings=self._settings,
            bus=self.bus,
            latency=self._latency,
            claim_wake=self._claim_wake,
        )
        self._effects: set[asyncio.Task[Any]] = set()

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
                self._journal.ack(entry_ids)
            case RecallCommand(stream=stream):
                self._executor.recall(stream)
            case DeadLetterCommand(item=item, reason=reason):
                self._spawn(self._queue.dead_letter(item, reason))
            case ReleaseCommand(entry_ids=ids, started=started):
                self._spawn(self._queue.release(list(ids), started=started))
            case WakeAtCommand(at=at):
                asyncio.get_running_loop().call_at(at, self._dispatch, TimerTick())
            case WakeClaimerCommand():
                self._claim_wake.set()
            case ClaimCommand() | JournalCommand():
                answers.append(command)
            case PublishEventCommand(event_type=event_type, data=data):
                self.bus.publish(event_type, data)
            case _:
                assert_never(command)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run an effect in the background, keeping a reference and logging failures."""
        task = asyncio.create_task(coro)
        self._effects.add(task)
        task.add_done_callback(self._effect_done)

    def _effect_done(self, task: asyncio.Task[Any]) -> None:
        self._effects.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("engine effect failed: %r", task.exception())
            self.bus.publish("queue_unavailable", {"error": repr(task.exception())})

    # -- the group commit's and the loops' questions -----------------------------------

    def plan_commit(self, counts: Mapping[StreamKey, int]) -> Mapping[StreamKey, int]:
        for answer in self._dispatch(CommitDueTick(counts)):
            if isinstance(answer, JournalCommand):
                return answer.claims
        return {}

    def committed(self, items: tuple[WorkItem, ...]) -> None:
        self._dispatch(CommittedTick(items))

    def commit_failed(self) -> None:
        self._dispatch(CommitFailedTick())

    def plan_claim(self, *, poll: bool) -> Mapping[StreamKey, int] | None:
        for answer in self._dispatch(ClaimDueTick(poll)):
            if isinstance(answer, ClaimCommand):
                return answer.wants
        return None

    def claimed(self, items: list[WorkItem]) -> None:
        self._dispatch(ClaimedTick(tuple(items)))

    def claim_failed(self) -> None:
        self._dispatch(ClaimFailedTick())

    def mark_behind(self, streams: frozenset[StreamKey]) -> None:
        """Work for ``streams`` is on disk again (a reclaim): claim it before new work."""
        self._dispatch(BacklogBehindTick(streams))

    def backlog_sampled(self, per_flow: Mapping[str, int]) -> None:
        self._dispatch(BacklogSampledTick(per_flow))

    def held_ids(self) -> list[str]:
        return held_ids(self._state)

    def streams(self) -> frozenset[StreamKey]:
        return frozenset(self._state.nodes)

    async def heartbeat(self) -> None:
        if self._state_store is not None and self._env.run_id is not None:
            # The horizon is taken now, on the loop: every save finishing later
            # records a later saved_at (see engine.pins).
            horizon = self.horizon()
            await asyncio.to_thread(self._state_store.heartbeat, self._env.run_id, horizon)

    # -- the run's life (for the session) -----------------------------------------------

    async def setup_nodes(self) -> None:
        """Build every node and call its ``setup``; on failure, tear down those set up."""
        try:
            for node_id, node_spec in self.spec.nodes.items():
                node = node_spec.factory()
                self._nodes[node_id] = node
                ctx = RunContext(self._env, node_id, {}, None)
                try:
                    with use_store(self._env.store):
                        await node.setup(ctx)
                finally:
                    ctx.release_pins()  # what setup saved and did not keep, it dropped
        except BaseException:
            await self.teardown_nodes()
            raise

    async def teardown_nodes(self) -> None:
        for node_id, node in self._nodes.items():
            try:
                await node.teardown()
            except Exception:
                log.exception("teardown of node %r failed", node_id)

    def load_latest(self, values: Mapping[tuple[str, str], Any]) -> None:
        """Latest values recorded by earlier runs (a resumed source continues from them)."""
        self._journal.latest_values.update(values)

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

    def pause(self) -> None:
        self._dispatch(PauseTick(self.flow))

    def resume(self) -> None:
        self._dispatch(ResumeTick(self.flow))

    def step(self) -> None:
        self._dispatch(StepTick(self.flow))

    def is_stopping(self) -> bool:
        return self._state.stopping

    def is_idle(self) -> bool:
        """Nothing held in memory or known to wait on disk, nothing to commit, no
        effect in flight (the queue may still hold work other processes enqueued)."""
        return is_settled(self._state) and not self._journal.has_unflushed() and not self._effects

    async def stop(self) -> None:
        """Start nothing new, let running nodes finish (sources within
        :data:`SOURCE_GRACE_S`, the others within :data:`NODE_GRACE_S`, then
        cancelled), hand what waits back to the queue, commit what is buffered
        and stop the loops."""
        self._dispatch(StopTick())
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
        await self._journal.flush()
        await self._journal.flush_latest()
        await self._loops.stop()
        if self._trace is not None:
            self._trace.close()

    # -- reading the run ---------------------------------------------------------------

    def snapshot(self) -> FlowSnapshot:
        state = self._state
        return FlowSnapshot(
            spec=self.spec,
            run_id=self._env.run_id,
            latest=dict(self._journal.latest_values),
            latest_ids=dict(self._journal.latest_ids),
            lines=stream_counts(state),
            paused=self.flow in state.paused,
            stopping=state.stopping,
            finished_items=self._executor.finished_items,
            started_items=dict(self._latency.totals),
        )

    def node(self, node_id: str) -> Node:
        """The instance running ``node_id`` (for tests and tools that inspect it)."""
        return self._nodes[node_id]

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
        return self._journal.has_unflushed()

    async def flush(self) -> None:
        await self._journal.flush()
