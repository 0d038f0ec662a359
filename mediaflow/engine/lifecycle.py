"""A run's life: its parts wired, its nodes set up, started, reshaped, stopped.

:func:`wire` builds the parts of one run around the runner's dispatch; each
part hands its ticks to that dispatch and reads the reducer's frozen state,
never the runner itself. :class:`RunLife` is what the session does with a
run: set its nodes up, start its loops, replace its nodes on a reload
(:meth:`RunLife.reshape`) and stop it cleanly (:meth:`RunLife.stop`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mediaflow.config import EngineSettings
from mediaflow.engine.commands import Dispatch
from mediaflow.engine.context import FlowEnv
from mediaflow.engine.effects import Effects, QueueHealth
from mediaflow.engine.events import EventBus, LatestThrottle
from mediaflow.engine.execution import NodeExecutor
from mediaflow.engine.heartbeat import Heartbeat
from mediaflow.engine.journal import Journal
from mediaflow.engine.lease_round import LeaseRound
from mediaflow.engine.loops import BackgroundLoops
from mediaflow.engine.nodeset import NodeSet
from mediaflow.engine.operate import FlowControls
from mediaflow.engine.pins import Pins
from mediaflow.engine.queue_roles import EngineQueue
from mediaflow.engine.reload import ReloadPlan
from mediaflow.engine.services import Services
from mediaflow.engine.state import EngineState
from mediaflow.engine.state_store import StateStore
from mediaflow.engine.stats import LatencyWindow
from mediaflow.engine.ticks import ControlTick, HaltTick, ReshapeTick, StopTick
from mediaflow.engine.trace import TraceWriter
from mediaflow.flows import FlowSpec
from mediaflow.live.hub import LiveHub
from mediaflow.node import RetryPolicy
from mediaflow.queue.contract import StreamKey
from mediaflow.store import ArtifactStore

SOURCE_GRACE_S = 2.0
NODE_GRACE_S = 10.0


@dataclass(frozen=True, slots=True)
class RunParts:
    """The parts of one run, one per seam (see :mod:`mediaflow.engine`)."""

    env: FlowEnv
    journal: Journal
    nodeset: NodeSet
    executor: NodeExecutor
    leases: LeaseRound
    heartbeat: Heartbeat
    loops: BackgroundLoops
    effects: Effects
    told: LatestThrottle  # what live views were told, offered each value once durable
    latency: LatencyWindow
    claim_wake: asyncio.Event


def wire(
    spec: FlowSpec,
    *,
    dispatch: Dispatch,
    state: Callable[[], EngineState],
    is_stopping: Callable[[str], bool],
    queue: EngineQueue,
    store: ArtifactStore,
    consumer: str,
    settings: EngineSettings,
    bus: EventBus,
    live: LiveHub,
    services: Services,
    state_store: StateStore | None,
    controls: FlowControls | None = None,
) -> RunParts:
    """The parts of a run of ``spec``, each handing its ticks to ``dispatch``."""
    pins, latency, health = Pins(), LatencyWindow(), QueueHealth(bus)
    told = LatestThrottle(bus, spec.name)
    journal = Journal(
        spec,
        queue=queue,
        consumer=consumer,
        dispatch=dispatch,
        pins=pins,
        latest_events=told,
        yield_every=settings.turn_items,
    )
    env = FlowEnv(
        spec,
        journal=journal,
        store=store,
        pins=pins,
        bus=bus,
        live=live,
        services=services,
        is_stopping=is_stopping,
        controls=controls,
    )
    nodeset = NodeSet(env)
    executor = NodeExecutor(
        env, nodeset.instances, dispatch=dispatch, latency=latency, yield_every=settings.turn_items
    )
    leases = LeaseRound(
        queue=queue,
        flow=spec.name,
        consumer=consumer,
        ttl_ms=settings.lease_ms,
        dispatch=dispatch,
        commit=journal.flush,
    )
    heartbeat = Heartbeat(env, state_store)
    claim_wake = asyncio.Event()
    loops = BackgroundLoops(
        spec.name,
        dispatch=dispatch,
        state=state,
        queue=queue,
        journal=journal,
        leases=leases,
        heartbeat=heartbeat,
        consumer=consumer,
        settings=settings,
        bus=bus,
        health=health,
        latency=latency,
        claim_wake=claim_wake,
    )
    effects = Effects(queue, health)
    return RunParts(
        env=env,
        journal=journal,
        nodeset=nodeset,
        executor=executor,
        leases=leases,
        heartbeat=heartbeat,
        loops=loops,
        effects=effects,
        told=told,
        latency=latency,
        claim_wake=claim_wake,
    )


class RunLife:
    """Setting up, starting, reshaping and stopping one run (for the session)."""

    def __init__(
        self,
        parts: RunParts,
        *,
        dispatch: Dispatch,
        state: Callable[[], EngineState],
        trace: TraceWriter | None,
        role: Role,
    ) -> None:
        """``role``: which of the flow's nodes this run executes (:func:`executed`)."""
        self._parts = parts
        self._dispatch = dispatch
        self._state = state
        self._trace = trace
        self._role = role

    async def setup_nodes(self) -> None:
        """Build every node and call its ``setup``; on failure, tear down those set up."""
        nodeset, spec = self._parts.nodeset, self._parts.env.spec
        nodeset.install(await nodeset.build(spec, executed(spec, self._role)))

    async def teardown_nodes(self) -> None:
        await self._parts.nodeset.tear_down_all()

    def load_latest(self, values: Mapping[tuple[str, str], Any]) -> None:
        """Latest values recorded by earlier runs (a resumed source continues from them)."""
        self._parts.journal.latest_values.update(values)
        self._parts.told.remember(values)

    def start(self, run_id: str) -> None:
        """Start the loops (and the trace's segment): nodes are set up, ticks may come."""
        self._parts.env.run_id = run_id
        if self._trace is not None:
            self._trace.start(self._state(), run_id)
        self._parts.loops.start()

    async def reshape(self, plan: ReloadPlan) -> None:
        """Replace the flow's nodes as ``plan`` says (a reload). The flow is left
        paused (the caller resumes it, once the queue hands work out again).

        New instances are set up first: if one fails, nothing changed and the
        error propagates. Then intake pauses, changed and removed sources are
        told to end, running batches finish on the old nodes (sources within
        :data:`SOURCE_GRACE_S`), old instances are torn down, the new ones
        installed, emissions rewired and what waited in memory for a replaced
        node goes back to the queue for its successor."""
        parts, dispatch, new = self._parts, self._dispatch, plan.new
        flow = new.name
        node_ids = executed(new, self._role)
        built = await parts.nodeset.build(new, (n for n in plan.rebuilt if n in node_ids))
        if flow not in self._state().paused:
            dispatch(ControlTick(flow, "pause"))
        halted = frozenset(StreamKey(flow, n) for n in plan.halted_sources)
        dispatch(HaltTick(halted))
        await parts.executor.settle(halted, SOURCE_GRACE_S)
        await parts.nodeset.retire(plan.retired)
        parts.env.rewire(new)
        parts.journal.rewire(new)
        parts.executor.rewire()
        parts.nodeset.install(built)
        streams = tuple(StreamKey(flow, n) for n in node_ids)
        dispatch(
            ReshapeTick(
                streams,
                frozenset(s for s in streams if new.nodes[s.node].is_source),
                frozenset(ordered_streams(new, node_ids)),
                frozenset(StreamKey(flow, n) for n in plan.changed),
                rates(new),
                retries(new),
            )
        )
        await parts.effects.settle()  # the lines handed back are back before anyone sweeps
        await parts.journal.flush()

    async def stop(self) -> None:
        """Start nothing new, let running nodes finish (sources within
        :data:`SOURCE_GRACE_S`, the others within :data:`NODE_GRACE_S`, then
        cancelled), hand what waits back to the queue (with what a claim on its
        way brings), commit what is buffered and stop the loops. Raises
        :class:`~mediaflow.queue.contract.QueueError` if the last commit fails
        (the loops are stopped all the same)."""
        parts = self._parts
        self._dispatch(StopTick())
        # Before the effects are awaited: a claim coming back now is handed back.
        await parts.loops.claim_settled()
        executor = parts.executor
        for sources, grace in ((True, SOURCE_GRACE_S), (False, NODE_GRACE_S)):
            tasks = executor.tasks(sources=sources)
            if tasks:
                _, late = await asyncio.wait(tasks, timeout=grace)
                for task in late:
                    task.cancel()
        remaining = executor.tasks(sources=True) + executor.tasks(sources=False)
        if remaining:
            await asyncio.gather(*remaining, return_exceptions=True)
        await parts.effects.settle()
        try:
            await parts.journal.flush()
            await parts.journal.flush_latest()
        finally:
            # Also when the queue cannot take the last commit (a full disk): the
            # loops must not outlive the run; what was not committed is redelivered
            # when the run is resumed.
            await parts.loops.stop()
            if self._state().ordered:
                await parts.leases.leave()  # a failure is logged: the leases lapse
            if self._trace is not None:
                self._trace.close()


def ordered_streams(spec: FlowSpec, node_ids: Collection[str]) -> list[StreamKey]:
    """Streams of the nodes among ``node_ids`` whose items must run in order, one
    executor at a time."""
    return [
        StreamKey(spec.name, n.id)
        for n in spec.nodes.values()
        if n.id in node_ids and not n.is_source and n.node_class.ordered
    ]


Role = Literal["run", "worker", "edge"]
"""What a runner is to its flow: its ``run`` (every node), a ``worker`` (one more
executor, never a source) or the run of an ``edge`` box that forwards
(:mod:`mediaflow.forward`): the sources and the nodes marked ``edge``, the other
nodes' work left in the local journal for the forwarder."""


def executed(spec: FlowSpec, role: Role) -> list[str]:
    """The nodes a runner of ``role`` executes (see :data:`Role`)."""
    if role == "worker":
        return [n for n, ns in spec.nodes.items() if not ns.is_source]
    if role == "edge":
        return [n for n, ns in spec.nodes.items() if ns.is_source or ns.edge]
    return list(spec.nodes)


def retries(spec: FlowSpec) -> dict[StreamKey, RetryPolicy]:
    """The retry policy of each node that has its own (``NodeSpec.retry``)."""
    return {StreamKey(spec.name, n.id): n.retry for n in spec.nodes.values() if n.retry is not None}


def rates(spec: FlowSpec) -> dict[StreamKey, float]:
    """The least seconds between two runs of each rate-limited node (``max_rate``)."""
    return {
        StreamKey(spec.name, n.id): 1.0 / n.max_rate
        for n in spec.nodes.values()
        if n.max_rate is not None
    }
