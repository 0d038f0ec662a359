"""A run of a flow from start to clean stop: open backends, start or resume, stop.

``FlowSession`` is the public way to run a flow from Python::

    async with FlowSession(spec, data_dir) as session:
        await session.wait(until_idle=True)

Starting a flow whose last run did not end cleanly (its process was killed)
*resumes* that run: the dead process's unacked items are handed back and
redelivered (``ctx.redelivery``), and sources that had already finished are
not started again. A run whose owner is still alive is refused.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, TextIO

from mediaflow.config import EngineSettings
from mediaflow.engine.context import RunContext
from mediaflow.engine.events import EventBus
from mediaflow.engine.reduce import is_idle
from mediaflow.engine.runner import FlowRunner
from mediaflow.engine.state_store import RunRecord, StateStore
from mediaflow.engine.ticks import ItemsArrivedTick, PauseTick, ResumeTick, StepTick, StopTick
from mediaflow.flows import FlowSpec
from mediaflow.queue import open_queue
from mediaflow.queue.contract import NewItem, StreamKey, WorkQueue
from mediaflow.store import ArtifactStore, use_store

log = logging.getLogger("mediaflow.engine")

StopReason = Literal["idle", "time", "signal", "stopped", "error"]
SOURCE_GRACE_S = 2.0
NODE_GRACE_S = 10.0
IDLE_POLL_S = 0.05


class FlowAlreadyRunning(RuntimeError):
    """The flow's current run belongs to a live process."""


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    resumed: bool
    reason: StopReason
    items: int
    duration_s: float


def new_consumer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_alive(owner: str, heartbeat_at: float, lease_s: float) -> bool:
    """Whether the process named ``owner`` (``host:pid:token``) may still be running."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host == socket.gethostname() and pid_text.isdigit():
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return time.time() - heartbeat_at < 2 * lease_s


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
        jsonl: TextIO | None = None,
    ) -> None:
        self.spec = spec
        self.data_dir = Path(data_dir)
        self.queue_url = queue_url
        self.settings = settings or EngineSettings.from_env()
        self.bus = bus or EventBus()
        self._queue = queue
        self._jsonl = jsonl
        self.runner: FlowRunner | None = None
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
        queue = self._queue or open_queue(self.queue_url, self.data_dir)
        store = ArtifactStore(self.data_dir)
        state_store = await asyncio.to_thread(StateStore, self.data_dir)
        last = await asyncio.to_thread(state_store.last_run, self.spec.name)
        crashed = last if last is not None and not last.ended else None
        runner = FlowRunner(
            self.spec,
            queue=queue,
            store=store,
            consumer=new_consumer_name(),
            settings=self.settings,
            bus=self.bus,
            jsonl=self._jsonl,
            state_store=state_store,
            resumed=crashed is not None,
        )
        self.runner = runner
        if crashed is not None:
            if owner_alive(crashed.owner, crashed.heartbeat_at, self.settings.lease_ms / 1000):
                await self._close_backends()
                raise FlowAlreadyRunning(
                    f"flow {self.spec.name!r} is already running (owner {crashed.owner}); "
                    "stop it first, or add executors with `mediaflow worker`"
                )
            await self._adopt(crashed)
        else:
            self.run_id = uuid.uuid4().hex
            await asyncio.to_thread(
                state_store.start_run, self.run_id, self.spec.name, runner.consumer
            )
        runner.latest_values.update(await queue.latest(self.spec.name))
        runner.run_id = self.run_id
        try:
            for node_id, node_spec in self.spec.nodes.items():
                node = node_spec.factory()
                runner.nodes[node_id] = node
                ctx = RunContext(runner, node_id, {}, None)
                try:
                    with use_store(runner.store):
                        await node.setup(ctx)
                finally:
                    ctx.release_pins()  # what setup saved and did not keep, it dropped
        except BaseException:
            # Nothing ran: undo what setup opened and leave the run resumable.
            await self._teardown_nodes(runner)
            await self._close_backends()
            raise
        runner.loops.start()
        if not self.resumed:
            await self._enqueue_sources(runner)
        self.bus.publish(
            "run_started",
            {"flow": self.spec.name, "run_id": self.run_id, "resumed": self.resumed},
        )

    async def _adopt(self, last: RunRecord) -> None:
        runner = self._require_runner()
        self.run_id = last.run_id
        self.resumed = True
        assert runner.state_store is not None
        await asyncio.to_thread(runner.state_store.adopt_run, last.run_id, runner.consumer)
        released = await runner.queue.release_consumer(last.owner)
        log.warning(
            "resuming run %s of flow %r after an unclean stop: %d items handed back",
            last.run_id,
            self.spec.name,
            released,
        )

    async def _enqueue_sources(self, runner: FlowRunner) -> None:
        items = [
            NewItem(StreamKey(self.spec.name, node.id), "source", {"run": self.run_id})
            for node in self.spec.sources()
        ]
        if not items:
            return
        stored = await runner.queue.enqueue(items, claim_for=runner.consumer)
        claimed = tuple(item for item in stored if item.deliveries > 0)
        if claimed:
            runner.dispatch(ItemsArrivedTick(claimed))

    def _require_runner(self) -> FlowRunner:
        if self.runner is None:
            raise RuntimeError("the session has not started")
        return self.runner

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
        if not is_idle(runner.state) or runner.has_unflushed() or runner.has_effects():
            return False
        backlog = await runner.queue.backlog_flows()
        # Re-check: work may have arrived while the queue answered.
        return backlog.get(self.spec.name, 0) == 0 and is_idle(runner.state)

    async def pause(self) -> None:
        runner = self._require_runner()
        await runner.queue.park(self.spec.name)
        runner.dispatch(PauseTick(self.spec.name))

    async def resume(self) -> None:
        runner = self._require_runner()
        await runner.queue.unpark(self.spec.name)
        runner.dispatch(ResumeTick(self.spec.name))

    async def step(self) -> None:
        """While paused, let exactly one more item start."""
        runner = self._require_runner()
        await runner.queue.unpark(self.spec.name, steps=1)
        runner.dispatch(StepTick(self.spec.name))
        runner.room_ready.set()

    async def stop(self, reason: StopReason = "stopped") -> RunOutcome:
        """Stop cleanly: sources end, running nodes finish (or are cancelled after a
        grace period), items waiting in memory go back to the queue, acks are
        flushed and the run is recorded as ended. Safe to call twice."""
        runner = self._require_runner()
        if self._stopped is not None:
            return self._outcome(runner, self._stopped)
        self._stopped = reason
        runner.stopping = True
        runner.dispatch(StopTick())
        await self._finish_tasks(runner)
        await runner.drain_effects()
        await runner.flush()
        await runner.loops.flush_latest_once()
        await runner.loops.stop()
        assert runner.state_store is not None
        await asyncio.to_thread(runner.state_store.end_run, self.run_id, reason)
        await self._teardown_nodes(runner)
        self.bus.publish(
            "run_finished",
            {"flow": self.spec.name, "run_id": self.run_id, "reason": reason},
        )
        await self._close_backends()
        return self._outcome(runner, reason)

    async def _finish_tasks(self, runner: FlowRunner) -> None:
        tasks = runner.node_tasks
        sources = {s for s, n in runner.state.nodes.items() if n.is_source}
        source_tasks = [t for s, t in tasks.items() if s in sources and not t.done()]
        if source_tasks:
            _, late = await asyncio.wait(source_tasks, timeout=SOURCE_GRACE_S)
            for task in late:
                task.cancel()
        others = [t for t in tasks.values() if not t.done()]
        if others:
            _, late = await asyncio.wait(others, timeout=NODE_GRACE_S)
            for task in late:
                task.cancel()
        remaining = [t for t in tasks.values() if not t.done()]
        if remaining:
            await asyncio.gather(*remaining, return_exceptions=True)

    async def _teardown_nodes(self, runner: FlowRunner) -> None:
        for node_id, node in runner.nodes.items():
            try:
                await node.teardown()
            except Exception:
                log.exception("teardown of node %r failed", node_id)

    async def _close_backends(self) -> None:
        runner = self.runner
        if runner is None:
            return
        await runner.queue.close()
        runner.store.close()
        if runner.state_store is not None:
            await asyncio.to_thread(runner.state_store.close)

    def _outcome(self, runner: FlowRunner, reason: StopReason) -> RunOutcome:
        return RunOutcome(
            run_id=self.run_id,
            resumed=self.resumed,
            reason=reason,
            items=runner.finished_items,
            duration_s=time.monotonic() - self._started_at,
        )
