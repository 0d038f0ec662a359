"""A run of a flow from start to clean stop: open backends, start or resume, stop.

``FlowSession`` is the public way to run a flow from Python::

    async with FlowSession(spec, data_dir) as session:
        await session.wait(until_idle=True)

Starting a flow whose last run did not end cleanly (its process was killed)
*resumes* that run: the dead process's unacked items are handed back and
redelivered (``ctx.redelivery``), and sources that had already finished are
not started again. A run whose owner is still alive is refused.

``FlowSession(..., worker=True)`` is one more executor of a flow that runs
elsewhere (``mediaflow worker``): it records no run, starts no source, and
claims the flow's work beside the run's own process, sharing the streams of
ordered nodes through leases (:mod:`.leasing`). ``edge=True`` is the run of an
edge box that forwards (:mod:`mediaflow.forward`): it executes only the sources
and the nodes marked ``edge``; the others' work waits in its journal.

A session reads no environment variable: it runs with the
:class:`~mediaflow.config.EngineSettings` it is given (the built-in defaults
without them). ``mediaflow run`` passes ``EngineSettings.from_env()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from mediaflow.config import EngineSettings
from mediaflow.engine.events import EventBus
from mediaflow.engine.journal import EmissionObserver
from mediaflow.engine.lifecycle import Role
from mediaflow.engine.operate import STEP_WAIT_S, FlowControls
from mediaflow.engine.operate import FlowStateError as FlowStateError
from mediaflow.engine.outcome import RunOutcome as RunOutcome
from mediaflow.engine.outcome import StopReason as StopReason
from mediaflow.engine.ownership import FlowAlreadyRunning as FlowAlreadyRunning
from mediaflow.engine.ownership import new_consumer_name, take_run
from mediaflow.engine.reload import ReloadPlan, plan_reload, retire_streams
from mediaflow.engine.runner import FlowRunner
from mediaflow.engine.services import Services
from mediaflow.engine.snapshot import FlowSnapshot
from mediaflow.engine.state_store import StateStore
from mediaflow.engine.trace import TraceWriter
from mediaflow.flows import FlowSpec
from mediaflow.flows.spec import NodeSpec
from mediaflow.live.hub import LiveHub
from mediaflow.node import Node
from mediaflow.queue import open_queue
from mediaflow.queue.contract import NewItem, QueueError, StreamKey, WorkQueue
from mediaflow.store import ArtifactStore, open_store

log = logging.getLogger("mediaflow.engine")

IDLE_POLL_S = 0.005


class FlowSession:
    """Owns the queue, store, state and runner of one flow run in this process."""

    def __init__(
        self,
        spec: FlowSpec,
        data_dir: Path,
        *,
        queue_url: str | None = None,
        queue: WorkQueue | None = None,
        settings: EngineSettings | None = None,
        bus: EventBus | None = None,
        live: LiveHub | None = None,
        worker: bool = False,
        edge: bool = False,
    ) -> None:
        self.spec = spec
        self.worker = worker
        self.role: Role = "worker" if worker else "edge" if edge else "run"
        self.data_dir = Path(data_dir)
        self.queue_url = queue_url
        self.settings = settings or EngineSettings()
        self.bus = bus or EventBus()
        # The live feeds of this session's cameras: its nodes write them (ctx.more.live),
        # the server beside it reads them. Pass one hub to share it between sessions.
        self.live = live or LiveHub()
        self.services = Services(self.settings)  # what its nodes share: ctx.more.shared
        # Pause, resume ... for the HTTP API and for nodes (ctx.more.control), one path.
        self.controls = FlowControls(self, spec.name)
        self._queue = queue
        self._observers: list[EmissionObserver] = []
        self.runner: FlowRunner | None = None
        self._backends: tuple[WorkQueue, ArtifactStore, StateStore] | None = None
        self.run_id = ""
        self.resumed = False
        self._started_at = 0.0
        self._stopped: StopReason | None = None

    async def __aenter__(self) -> FlowSession:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop("error" if exc is not None else "stopped")

    async def start(self) -> None:
        """Open backends, set nodes up, and start or resume the run.

        Raises :class:`FlowAlreadyRunning` if a live process owns the run.
        """
        self._started_at = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        queue = self._queue or open_queue(
            self.queue_url, self.data_dir, sqlite_sync=self.settings.sqlite_sync
        )
        # The data directory, or a cache of an artifact service (settings.store).
        store = open_store(self.data_dir, self.settings.store)
        state_store = await asyncio.to_thread(StateStore, self.data_dir)
        self._backends = (queue, store, state_store)
        consumer = new_consumer_name()
        if self.worker:
            # Not a run of its own: the run belongs to the flow's `mediaflow run`.
            self.run_id = f"worker:{consumer}"
            await self._start_runner(queue, store, None, consumer)
            return
        try:
            self.run_id, self.resumed = await take_run(
                self.spec.name,
                consumer,
                state_store=state_store,
                queue=queue,
                lease_s=self.settings.lease_ms / 1000,
            )
        except FlowAlreadyRunning:
            await self._close_backends()
            raise
        await self._start_runner(queue, store, state_store, consumer)

    async def _start_runner(
        self,
        queue: WorkQueue,
        store: ArtifactStore,
        state_store: StateStore | None,
        consumer: str,
    ) -> None:
        runner = FlowRunner(
            self.spec,
            queue=queue,
            store=store,
            consumer=consumer,
            services=self.services,
            controls=self.controls,
            settings=self.settings,
            bus=self.bus,
            live=self.live,
            state_store=state_store,
            resumed=self.resumed,
            trace=TraceWriter(trace) if (trace := self.settings.trace_path) else None,
            role=self.role,
        )
        self.runner = runner
        for observer in self._observers:
            runner.journal.subscribe(observer)
        runner.life.load_latest(await queue.latest(self.spec.name))
        try:
            await runner.life.setup_nodes()
        except BaseException:
            # Nothing ran: leave the run resumable.
            await self._close_backends()
            raise
        runner.life.start(self.run_id)
        if self.worker:
            self.bus.publish("worker_started", {"flow": self.spec.name, "consumer": consumer})
            return
        if not self.resumed:
            await self._enqueue_sources(runner, queue)
        self.bus.publish(
            "run_started",
            {"flow": self.spec.name, "run_id": self.run_id, "resumed": self.resumed},
        )

    async def _enqueue_sources(
        self, runner: FlowRunner, queue: WorkQueue, sources: list[NodeSpec] | None = None
    ) -> None:
        items = [
            NewItem(StreamKey(self.spec.name, node.id), "source", {"run": self.run_id})
            for node in (self.spec.sources() if sources is None else sources)
        ]
        if items:
            stored = await queue.commit(items, claim_for=runner.consumer)
            runner.admit([item for item in stored if item.deliveries > 0])

    @property
    def started(self) -> bool:
        """Whether :meth:`start` has set the run up (it may have stopped since)."""
        return self.runner is not None

    def _require_runner(self) -> FlowRunner:
        if self.runner is None:
            raise RuntimeError("the session has not started")
        return self.runner

    @property
    def queue(self) -> WorkQueue:
        """The work queue this session runs on (once started)."""
        if self._backends is None:
            raise RuntimeError("the session has not started")
        return self._backends[0]

    @property
    def emissions_landed(self) -> asyncio.Event:
        """Set by every commit that lands emitted items (once started): a box's
        forwarder waits for it, and clears it, instead of polling its journal."""
        return self._require_runner().journal.emissions_landed

    def snapshot(self) -> FlowSnapshot:
        """The run as it is now (latest values, lines, counters); see :class:`FlowSnapshot`."""
        return self._require_runner().snapshot()

    def node(self, node_id: str) -> Node:
        """The instance running ``node_id`` (for tests and tools that inspect it)."""
        return self._require_runner().node(node_id)

    def observe_emissions(self, observer: EmissionObserver) -> None:
        """Tell ``observer`` of every value the run emits (see
        :data:`~mediaflow.engine.journal.EmissionObserver`); call before :meth:`start`."""
        self._observers.append(observer)

    def observe_latency(self, callback: Callable[[str, float], None]) -> None:
        """Call ``callback(node, seconds)`` for every emit-to-start latency recorded."""
        self._require_runner().observe_latency(callback)

    async def wait(self, *, for_s: float | None = None, until_idle: bool = False) -> StopReason:
        """Block until ``for_s`` elapsed, or (``until_idle``) every source ended and the
        flow's queue drained, or :meth:`stop` was called. Does not stop the run."""
        runner = self._require_runner()
        deadline = None if for_s is None else time.monotonic() + for_s
        while self._stopped is None:
            if deadline is not None and time.monotonic() >= deadline:
                return "time"
            if until_idle and await self._idle(runner):
                return "idle"
            await asyncio.sleep(IDLE_POLL_S)
        return self._stopped

    async def _idle(self, runner: FlowRunner) -> bool:
        if not runner.is_idle():
            return False
        try:
            backlog = await self.queue.backlog_flows()
        except QueueError:
            return False  # the queue is away (the loops report it): not known to be idle
        # Re-check: work may have arrived while the queue answered.
        return backlog.get(self.spec.name, 0) == 0 and runner.is_idle()

    async def pause(self) -> None:
        runner = self._require_runner()
        await self.queue.park(self.spec.name)
        runner.control("pause")

    async def resume(self) -> None:
        runner = self._require_runner()
        await self.queue.unpark(self.spec.name)
        runner.control("resume")

    async def step(self, *, wait_s: float = STEP_WAIT_S) -> dict[str, Any] | None:
        """While paused, let exactly one more item start: the oldest waiting.

        Returns which (the ``flow_stepped`` event's data: node, entry_id, seq,
        deliveries, enqueued_at) once it started, or None if nothing started
        within ``wait_s`` (nothing waits). Raises :class:`FlowStateError` if the
        flow is not paused, or is disabled."""
        runner = self._require_runner()
        snapshot = runner.snapshot()
        if snapshot.disabled:
            raise FlowStateError(f"flow {self.spec.name!r} is disabled: enable it first")
        if not snapshot.paused:
            raise FlowStateError(f"flow {self.spec.name!r} is not paused: pause it first")
        stepped = self.bus.subscribe(types=frozenset({"flow_stepped"}))
        try:
            await self.queue.unpark(self.spec.name, steps=1)
            runner.control("step")
            deadline = time.monotonic() + wait_s
            while (left := deadline - time.monotonic()) > 0:
                event = await stepped.get(timeout=left)
                if event is not None and event.data.get("flow") == self.spec.name:
                    return dict(event.data)
            return None
        finally:
            stepped.close()

    async def reload(self, spec: FlowSpec) -> ReloadPlan:
        """Replace the flow's nodes with ``spec``'s (a reloaded flow file) without
        losing queued work: claimed work finishes on the old nodes, every queued
        item goes to the new ones, an item of a node that no longer exists is
        dead-lettered with that reason, and sources whose options did not change
        keep running. Raises :class:`ReloadRefused` for another flow's file and
        whatever a new node's ``setup`` raises (then nothing changed)."""
        runner = self._require_runner()
        plan = plan_reload(self.spec, spec)
        if plan.is_noop:
            return plan
        queue = self.queue
        was_paused = runner.snapshot().paused
        if not was_paused:
            # Nothing is handed out while lines go back to the queue: a claim
            # must not fetch newer items before the older ones are back.
            await queue.park(spec.name)
        try:
            await runner.life.reshape(plan)
        finally:
            if not was_paused:
                await queue.unpark(spec.name)
        self.spec = spec
        retired = await retire_streams(
            queue,
            spec.name,
            plan.removed,
            paused=was_paused,
            # Under the runner's own name: it may still hold the removed nodes' leases
            # (they lapse unrenewed), and a claim on a stream leased to another takes
            # nothing.
            sweeper=runner.consumer,
        )
        if not self.worker:
            added = [spec.nodes[n] for n in plan.added if spec.nodes[n].is_source]
            await self._enqueue_sources(runner, queue, added)
        if not was_paused:
            runner.control("resume")
        self.bus.publish(
            "flow_reloaded", {"flow": spec.name, **plan.to_json(), "dead_lettered": retired}
        )
        log.info("reloaded flow %r: %s", spec.name, plan.to_json())
        return plan

    async def disable(self) -> None:
        """Stop the flow's sources and start nothing of it; its work is kept, on
        disk and in memory, until :meth:`enable`."""
        runner = self._require_runner()
        await self.queue.park(self.spec.name)
        runner.control("disable")

    async def enable(self) -> None:
        """Undo :meth:`disable`: sources resume where they were, work runs again."""
        runner = self._require_runner()
        await self.queue.unpark(self.spec.name)
        runner.control("enable")

    async def stop(self, reason: StopReason = "stopped") -> RunOutcome:
        """Stop cleanly: sources end, running nodes finish (or are cancelled after a
        grace period), items waiting in memory go back to the queue, acks are
        flushed and the run is recorded as ended. Safe to call twice.

        Raises ``QueueError`` or ``sqlite3.Error`` if the last commit or the run's
        end cannot be written (a full disk); everything is closed all the same,
        and the run is left to be resumed."""
        runner = self._require_runner()
        if self._stopped is not None:
            return self._outcome(runner, self._stopped)
        self._stopped = reason
        assert self._backends is not None  # the runner exists, so the backends do
        try:
            await runner.life.stop()
            if not self.worker:
                await asyncio.to_thread(self._backends[2].end_run, self.run_id, reason)
        finally:
            # Also when the last commit or the run's end could not be written (a
            # full disk): nodes and files are closed, and the run, not recorded as
            # ended, is resumed by the next start (what was not acked is redelivered).
            await runner.life.teardown_nodes()
            await self._close_backends()
        self.bus.publish(
            "worker_finished" if self.worker else "run_finished",
            {"flow": self.spec.name, "run_id": self.run_id, "reason": reason},
        )
        return self._outcome(runner, reason)

    async def _close_backends(self) -> None:
        await self.services.close()  # after the nodes' teardown, which may use them
        if self._backends is None:
            return
        queue, store, state_store = self._backends
        await queue.close()
        store.close()
        await asyncio.to_thread(state_store.close)

    def _outcome(self, runner: FlowRunner, reason: StopReason) -> RunOutcome:
        snapshot = runner.snapshot()
        return RunOutcome(
            run_id=self.run_id,
            resumed=self.resumed,
            reason=reason,
            items=snapshot.finished_items,
            duration_s=time.monotonic() - self._started_at,
            failed_sources=snapshot.failed_sources,
        )
