"""Running nodes: one task per busy node, running the batches the reducer starts.

A ``StartNodeCommand`` hands a node a batch of items; the node's task runs
them one after the other and reports how the batch ended with one
:class:`~.ticks.NodeFinishedTick` (how many succeeded, and the error of the
one that raised). If the reducer starts the next batch of the same node while
its task reports, the task carries on with it: no new task, no loop turn.

A batch ends early, its rest unstarted, when it is recalled (pause, stop) or
after :data:`SLICE_S` of running: the reducer starts the rest again at once,
so a slow node acks what it finished every few milliseconds and a fast one
gets through a whole line per report. Either way the tick says exactly how
far the batch got, so the run replays the same.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Final, NamedTuple

from mediaflow.engine.away import Dependency, Wait, away_from, waited
from mediaflow.engine.commands import Dispatch, StartNodeCommand
from mediaflow.engine.context import FlowEnv, RunContext
from mediaflow.engine.journal import GUARD_KEY
from mediaflow.engine.stats import LatencyWindow
from mediaflow.engine.ticks import NodeFinishedTick
from mediaflow.media import decode_value
from mediaflow.node import ItemRefused, Node
from mediaflow.queue.contract import QueueError, StreamKey, WorkItem
from mediaflow.store import use_store
from mediaflow.store.current import saving_through

log = logging.getLogger("mediaflow.engine")

SLICE_S: Final = 0.005
"""A batch reports after this much running time even if items remain."""


class BatchEnd(NamedTuple):
    """How a batch ended, as :class:`~.ticks.NodeFinishedTick` says it (its fields
    after ``entry_id``)."""

    done: int
    error: str | None = None
    away: Dependency | None = None
    refused: bool = False


class NodeExecutor:
    """The node tasks of one runner. Each batch's outcome goes to the reducer as
    a ``NodeFinishedTick`` through ``dispatch``."""

    def __init__(
        self,
        env: FlowEnv,
        nodes: Mapping[str, Node],
        *,
        dispatch: Dispatch,
        latency: LatencyWindow,
        yield_every: int,
    ) -> None:
        """``yield_every``: a node task yields the event loop after this many items
        of a batch (see ``EngineSettings.turn_items``)."""
        self._env = env
        self._yield_every = yield_every
        self._nodes = nodes
        self._dispatch = dispatch
        self._record_latency = latency.record
        self._tasks: dict[StreamKey, asyncio.Task[None]] = {}
        self._next: dict[StreamKey, StartNodeCommand] = {}
        self._recalled: set[StreamKey] = set()
        self._sources = {StreamKey(env.flow, n.id) for n in env.spec.sources()}
        self.finished_items = 0
        # Sources whose last run ended by an error and that have not started again.
        self.failed_sources: dict[str, str] = {}
        self._waits: dict[str, Wait] = {}  # nodes waiting for a dependency that is away

    def start(self, command: StartNodeCommand) -> None:
        stream = command.stream
        self._recalled.discard(stream)
        if asyncio.current_task() is self._tasks.get(stream):
            # The node's own task is reporting its previous batch: it carries on.
            self._next[stream] = command
        else:
            self._tasks[stream] = asyncio.create_task(self._run(command))

    def recall(self, stream: StreamKey) -> None:
        self._recalled.add(stream)

    def rewire(self) -> None:
        """The flow's nodes changed (a reload): which of them are sources."""
        self._sources = {StreamKey(self._env.flow, n.id) for n in self._env.spec.sources()}

    async def settle(self, halted: frozenset[StreamKey], grace_s: float) -> None:
        """Wait for every node task but the sources not in ``halted`` to end (the
        reducer recalled them: each ends after its current item); a halted
        source not done within ``grace_s`` is cancelled."""
        tasks = {
            stream: task
            for stream, task in self._tasks.items()
            if not task.done() and (stream not in self._sources or stream in halted)
        }
        sources = [task for stream, task in tasks.items() if stream in halted]
        if sources:
            _, late = await asyncio.wait(sources, timeout=grace_s)
            for task in late:
                task.cancel()
        if tasks:
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    def tasks(self, *, sources: bool) -> list[asyncio.Task[None]]:
        """The unfinished tasks of source nodes, or of the others."""
        return [
            task
            for stream, task in self._tasks.items()
            if (stream in self._sources) == sources and not task.done()
        ]

    async def _run(self, command: StartNodeCommand | None) -> None:
        # ``mediaflow.save_artifact`` without a store saves into the flow's (this
        # task's context only; threads started with ``to_thread`` inherit it).
        with use_store(self._env.store):
            while command is not None:
                stream = command.stream
                end = await self._run_batch(command)
                if end.away is None:
                    self._waited(stream.node)
                entry_id = command.items[0].entry_id
                self._dispatch(NodeFinishedTick(stream, entry_id, *end))
                command = self._next.pop(stream, None)

    async def _run_batch(self, command: StartNodeCommand) -> BatchEnd:
        """How many items of the batch succeeded, the error of the one that raised,
        the dependency whose being away was the only cause (:func:`.away_from`), and
        whether the node refused the item for good (:class:`~mediaflow.node.ItemRefused`)."""
        stream, items = command.stream, command.items
        node_id = stream.node
        node = self._nodes[node_id]
        if items[0].kind == "source":  # a source's batch is its one long-lived item
            return await self._run_source(node_id, node, items[0], command.attempt)
        env, record_latency = self._env, self._record_latency
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SLICE_S
        index = 0
        try:
            if command.commit_first:
                try:
                    try:
                        await env.journal.flush()
                    except QueueError:
                        # The queue is away: not the node's failure, so it costs no
                        # attempt; wait for the commit loop to get the acks through.
                        await env.journal.flush_when_available()
                except Exception as exc:  # any other failure: retried like a failed run
                    return BatchEnd(0, f"could not commit earlier acks first: {exc}")
            with saving_through() as runs:
                for index, item in enumerate(items):
                    if index:
                        if stream in self._recalled or loop.time() >= deadline:
                            return BatchEnd(index)
                        if index % self._yield_every == 0:
                            await asyncio.sleep(0)
                    payload = item.payload
                    value = payload["value"]
                    if type(value) is dict and GUARD_KEY in value:
                        if self._stale(node_id, item, value[GUARD_KEY]):
                            continue  # done: acked with the batch, never run
                        value = value["value"]
                    inputs = {payload["port"]: decode_value(value)}
                    ctx = runs.run = RunContext(env, node_id, inputs, item, item.seq)
                    record_latency(node_id, time.time() - payload["at"])
                    self.finished_items += 1
                    try:
                        outputs = await node.run(ctx)
                        if outputs:
                            for port, value in outputs.items():
                                await ctx.emit(port, value)
                    except asyncio.CancelledError:
                        return BatchEnd(index, "cancelled while stopping")
                    except Exception as exc:
                        attempt = command.attempt if index == 0 else 1
                        error, away = self._failed(node_id, item, attempt, exc)
                        return BatchEnd(index, error, away, isinstance(exc, ItemRefused))
                    finally:
                        ctx.end()  # what the node saved and did not emit, it dropped
        except asyncio.CancelledError:
            # Cancelled between items (stopping): the item at ``index`` never ran.
            return BatchEnd(index)
        return BatchEnd(len(items))

    def _stale(self, node_id: str, item: WorkItem, guard: str) -> bool:
        """Whether ``item`` came from an earlier generation of its source (which
        restarted since); such an item is reported and dropped. Unknown here (the
        source runs in another process): not stale."""
        source = item.payload["src"].partition(".")[0]
        current = self._env.journal.guards.get(source)
        if current is None or current == guard:
            return False
        self._env.bus.publish(
            "stale_dropped",
            {"flow": self._env.flow, "node": node_id, "source": source, "seq": item.seq},
        )
        return True

    async def _run_source(self, node_id: str, node: Node, item: WorkItem, attempt: int) -> BatchEnd:
        """Run a source for as long as it runs; a source cancelled while stopping ended.
        Its saves wait for a store that is away (:class:`~.outages.StoreOutages`)."""
        env = self._env
        bus, flow = env.bus, env.flow
        bus.publish(
            "source_started", {"flow": flow, "node": node_id, "redelivery": item.redelivery}
        )
        self.failed_sources.pop(node_id, None)
        ctx = RunContext(env, node_id, {}, item)
        if node.guarded:
            env.journal.guards[node_id] = uuid.uuid4().hex[:16]  # a new generation
        error: str | None = None
        away: Dependency | None = None
        self.finished_items += 1
        try:
            with saving_through(ctx):
                await node.run(ctx)
        except asyncio.CancelledError:
            if not env.is_stopping(node_id):
                error = "cancelled while stopping"
        except Exception as exc:
            error, away = self._failed(node_id, item, attempt, exc)
        finally:
            ctx.end()
        bus.publish("source_ended", {"flow": flow, "node": node_id, "error": error})
        if error is not None:
            self.failed_sources[node_id] = error
        return BatchEnd(1) if error is None else BatchEnd(0, error, away)

    def _failed(
        self, node_id: str, item: WorkItem, attempt: int, exc: Exception
    ) -> tuple[str, Dependency | None]:
        """Log a node's failure on ``item``; the error as the reducer gets it, and the
        dependency whose being away was the only cause (no traceback then: the error
        says which, and the node did nothing wrong). A wait for a dependency is
        logged when it begins; its further tries only at debug level."""
        error = f"{type(exc).__name__}: {exc}"
        away = away_from(exc)
        if isinstance(exc, ItemRefused):
            log.warning("node %r refused item %s for good: %s", node_id, item.entry_id, error)
            return error, None
        if away is not None:
            wait = self._waits[node_id] = waited(self._waits.get(node_id), away, time.monotonic())
            log.log(
                logging.WARNING if wait.tries == 1 else logging.DEBUG,
                "node %r could not run item %s: the %s is away (%s); it runs again later,"
                " costing no attempt (try %d of this wait)",
                node_id,
                item.entry_id,
                away,
                error,
                wait.tries,
            )
            return error, away
        log.warning(
            "node %r failed on item %s (attempt %d): %s",
            node_id,
            item.entry_id,
            attempt,
            error,
            exc_info=not isinstance(exc, TypeError | ValueError | KeyError),
        )
        return error, None

    def _waited(self, node_id: str) -> None:
        """A batch of ``node_id`` ended without meeting a dependency away: its wait, if
        it had one, is over."""
        wait = self._waits.pop(node_id, None)
        if wait is not None:
            log.info(
                "node %r runs again: the %s answered after %.1f s (%d tries met it away)",
                node_id,
                wait.dependency,
                time.monotonic() - wait.since,
                wait.tries,
            )
