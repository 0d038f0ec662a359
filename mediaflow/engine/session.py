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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, TextIO

from mediaflow.config import EngineSettings
from mediaflow.engine.events import EventBus
from mediaflow.engine.runner import FlowRunner
from mediaflow.engine.snapshot import FlowSnapshot
from mediaflow.engine.state_store import StateStore
from mediaflow.engine.trace import TraceWriter
from mediaflow.flows import FlowSpec
from mediaflow.node import Node
from mediaflow.queue import open_queue
from mediaflow.queue.contract import NewItem, StreamKey, WorkQueue
from mediaflow.store import ArtifactStore

log = logging.getLogger("mediaflow.engine")

StopReason = Literal["idle", "time", "signal", "stopped", "error"]
IDLE_POLL_S = 0.005


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
        queue = self._queue or open_queue(self.queue_url, self.data_dir)
        store = ArtifactStore(self.data_dir)
        state_store = await asyncio.to_thread(StateStore, self.data_dir)
        self._backends = (queue, store, state_store)
        last = await asyncio.to_thread(state_store.last_run, self.spec.name)
        crashed = last if last is not None and not last.ended else None
        consumer = new_consumer_name()
        if crashed is not None:
            if owner_alive(crashed.owner, crashed.heartbeat_at, self.settings.lease_ms / 1000):
                await self._close_backends()
                raise FlowAlreadyRunning(
                    f"flow {self.spec.name!r} is already running (owner {crashed.owner}); "
                    "stop it first, or add executors with `mediaflow worker`"
                )
            self.run_id = crashed.run_id
            self.resumed = True
            await asyncio.to_thread(state_store.adopt_run, crashed.run_id, consumer)
            released = await queue.release_consumer(crashed.owner)
            log.warning(
                "resuming run %s of flow %r after an unclean stop: %d items handed back",
                crashed.run_id,
                self.spec.name,
                released,
            )
        else:
            self.run_id = uuid.uuid4().hex
            await asyncio.to_thread(state_store.start_run, self.run_id, self.spec.name, consumer)
        runner = FlowRunner(
            self.spec,
            queue=queue,
            store=store,
            consumer=consumer,
            settings=self.settings,
            bus=self.bus,
            jsonl=self._jsonl,
            state_store=state_store,
            resumed=self.resumed,
            trace=TraceWriter.from_env(),
        )
        self.runner = runner
        runner.load_latest(await queue.latest(self.spec.name))
        try:
            await runner.setup_nodes()
        except BaseException:
            # Nothing ran: leave the run resumable.
            await self._close_backends()
            raise
        runner.start(self.run_id)
        if not self.resumed:
            await self._enqueue_sources(runner, queue)
        self.bus.publish(
            "run_started",
            {"flow": self.spec.name, "run_id": self.run_id, "resumed": self.resumed},
        )

    async def _enqueue_sources(self, runner: FlowRunner, queue: WorkQueue) -> None:
        items = [
            NewItem(StreamKey(self.spec.name, node.id), "source", {"run": self.run_id})
            for node in self.spec.sources()
        ]
        if items:
            stored = await queue.enqueue(items, claim_for=runner.consumer)
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

    def snapshot(self) -> FlowSnapshot:
        """The run as it is now (latest values, lines, counters); see :class:`FlowSnapshot`."""
        return self._require_runner().snapshot()

    def node(self, node_id: str) -> Node:
        """The instance running ``node_id`` (for tests and tools that inspect it)."""
        return self._require_runner().node(node_id)

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
        backlog = await self.queue.backlog_flows()
        # Re-check: work may have arrived while the queue answered.
        return backlog.get(self.spec.name, 0) == 0 and runner.is_idle()

    async def pause(self) -> None:
        runner = self._require_runner()
        await self.queue.park(self.spec.name)
        runner.pause()

    async def resume(self) -> None:
        runner = self._require_runner()
        await self.queue.unpark(self.spec.name)
        runner.resume()

    async def step(self) -> None:
        """While paused, let exactly one more item start."""
        runner = self._require_runner()
        await self.queue.unpark(self.spec.name, steps=1)
        runner.step()

    async def stop(self, reason: StopReason = "stopped") -> RunOutcome:
        """Stop cleanly: sources end, running nodes finish (or are cancelled after a
        grace period), items waiting in memory go back to the queue, acks are
        flushed and the run is recorded as ended. Safe to call twice."""
        runner = self._require_runner()
        if self._stopped is not None:
            return self._outcome(runner, self._stopped)
        self._stopped = reason
        await runner.stop()
        assert self._backends is not None  # the runner exists, so the backends do
        await asyncio.to_thread(self._backends[2].end_run, self.run_id, reason)
        await runner.teardown_nodes()
        self.bus.publish(
            "run_finished",
            {"flow": self.spec.name, "run_id": self.run_id, "reason": reason},
        )
        await self._close_backends()
        return self._outcome(runner, reason)

    async def _close_backends(self) -> None:
        if self._backends is None:
            return
        queue, store, state_store = self._backends
        await queue.close()
        store.close()
        await asyncio.to_thread(state_store.close)

    def _outcome(self, runner: FlowRunner, reason: StopReason) -> RunOutcome:
        return RunOutcome(
            run_id=self.run_id,
            resumed=self.resumed,
            reason=reason,
            items=runner.snapshot().finished_items,
            duration_s=time.monotonic() - self._started_at,
        )
