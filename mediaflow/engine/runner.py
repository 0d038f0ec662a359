"""The async shell around the reducer: turns commands into effects.

One :class:`FlowRunner` executes one flow in this process. Everything it
decides comes from :func:`~mediaflow.engine.reduce.reduce`; this module only

* feeds ticks in (:meth:`FlowRunner.dispatch`, synchronous, so a tick and its
  commands are applied without another coroutine interleaving),
* applies commands (start or continue a node, buffer an ack, dead-letter,
  release, set a timer, publish an event),
* journals emissions (:meth:`FlowRunner.emit`) by group commit
  (:meth:`FlowRunner.flush`), and
* keeps background loops (:mod:`.loops`): commit, claim, touch leases,
  reclaim stale work, sample the backlog, flush latest values, and
* tracks the references its nodes saved and have not yet made durable
  (:mod:`.pins`): :meth:`FlowRunner.horizon`, which the heartbeat records for
  garbage collection.

Emissions go to the queue first and to a node second. One transaction per
event-loop turn carries the turn's emissions, the acks of finished items and
the latest value per port; an emission whose reader is caught up and has room
is claimed for this process in that same transaction, the others wait on disk
until the claimer fetches them in order.

Every hand-off in memory is bounded, each with its policy:

* a node's line: ``EngineSettings.node_buffer`` items (one after a crash);
  beyond it work waits on disk (*block at the queue*);
* the outbox of the next group commit: :data:`OUTBOX_LIMIT` emissions; an
  emitter that fills it waits for the commit (*block the producer*);
* pending acks: at most the items held, committed with the next group;
* GC pins: one per reference a running node saved and has not published;
* event subscribers: a ring per reader (*drop oldest*, counted);
* ``latest`` events: :class:`~.events.LatestThrottle` (*keep newest*);
* latency samples: :class:`~.stats.LatencyWindow` (*keep newest*).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any, TextIO, assert_never

from mediaflow.config import EngineSettings
from mediaflow.engine.commands import (
    AckCommand,
    Command,
    DeadLetterCommand,
    PublishEventCommand,
    ReleaseCommand,
    StartNodeCommand,
    WakeAtCommand,
)
from mediaflow.engine.context import RunContext
from mediaflow.engine.events import EventBus, LatestThrottle
from mediaflow.engine.loops import BackgroundLoops
from mediaflow.engine.pins import Held, Pin, Pins
from mediaflow.engine.reduce import (
    EngineState,
    Limits,
    initial_state,
    local_room,
    reduce,
)
from mediaflow.engine.state_store import StateStore
from mediaflow.engine.stats import LatencyWindow
from mediaflow.engine.ticks import (
    BacklogBehindTick,
    ItemsArrivedTick,
    NodeFinishedTick,
    Tick,
    TimerTick,
)
from mediaflow.flows import FlowSpec
from mediaflow.media import MediaRef, check_port_value, decode_value, encode_value
from mediaflow.node import ItemInfo, Node
from mediaflow.queue.contract import NewItem, StreamKey, WorkItem, WorkQueue
from mediaflow.store import ArtifactStore, use_store

log = logging.getLogger("mediaflow.engine")

# A group commit holds at most this many emissions; an emitter that fills it
# waits for the commit (backpressure instead of unbounded memory).
OUTBOX_LIMIT = 512
# A source in a tight loop yields to the event loop every this many emissions.
YIELD_EVERY = 16


def limits_from(settings: EngineSettings) -> Limits:
    return Limits(
        max_deliveries=settings.max_deliveries,
        max_attempts=settings.max_attempts,
        retry_base_s=settings.retry_base_s,
        retry_max_s=settings.retry_max_s,
        node_buffer=settings.node_buffer,
        degraded_samples=settings.degraded_samples,
        degraded_min_items=settings.degraded_min_items,
    )


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
    ) -> None:
        self.spec = spec
        self.state_store = state_store
        self.run_id: str | None = None
        self.queue = queue
        self.store = store
        self.consumer = consumer
        self.settings = settings or EngineSettings()
        self.bus = bus or EventBus()
        self.jsonl = jsonl
        self.stopping = False
        self.latest_values: dict[tuple[str, str], Any] = {}
        # Which emission each latest value is (see :meth:`emit`): what live views
        # use to show a value once however many ways it reaches them.
        self.latest_ids: dict[tuple[str, str], dict[str, int]] = {}
        self._emissions: dict[tuple[str, str], int] = {}
        self.dirty_latest: dict[tuple[str, str], Any] = {}
        self.latency = LatencyWindow()
        self.latest_events = LatestThrottle(self.bus, spec.name)
        self.nodes: dict[str, Node] = {}
        self.routes: dict[tuple[str, str], list[tuple[StreamKey, str]]] = {}
        for edge in spec.edges:
            stream = StreamKey(spec.name, edge.target.node)
            route = self.routes.setdefault((edge.source.node, edge.source.port), [])
            route.append((stream, edge.target.port))
        streams = [StreamKey(spec.name, node_id) for node_id in spec.nodes]
        sources = [StreamKey(spec.name, n.id) for n in spec.sources()]
        self.state: EngineState = initial_state(
            limits_from(self.settings), streams, sources, resumed=resumed
        )
        # Bumped when an emission for a stream is left unclaimed on disk: a claim that
        # started before the bump cannot prove the stream is caught up.
        self._behind_epoch: dict[StreamKey, int] = {}
        self.pending_acks: list[str] = []
        self.room_ready = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.node_tasks: dict[StreamKey, asyncio.Task[None]] = {}
        self.loops = BackgroundLoops(self)
        self.finished_items = 0
        # Emissions waiting for the next group commit (bounded by OUTBOX_LIMIT).
        self.outbox: list[tuple[StreamKey, dict[str, Any]]] = []
        self.outbox_latest: dict[tuple[str, str, str], Any] = {}
        # Pins of the references the outbox carries: given back once it has landed.
        self.outbox_pins: list[Pin] = []
        self.pins = Pins()
        self.outbox_ready = asyncio.Event()  # anything to commit
        self.emissions_ready = asyncio.Event()  # emissions to commit (ends an ack linger)
        self._flush_lock = asyncio.Lock()
        self._unyielded = 0
        self._next_item: dict[StreamKey, tuple[WorkItem, int]] = {}

    # -- ticks in, commands out -------------------------------------------------

    def dispatch(self, tick: Tick) -> None:
        """Reduce ``tick`` and apply the resulting commands. Never blocks."""
        self.state, commands = reduce(self.state, tick, asyncio.get_running_loop().time())
        for command in commands:
            self._apply(command)

    def _apply(self, command: Command) -> None:
        match command:
            case StartNodeCommand(item=item, attempt=attempt):
                if asyncio.current_task() is self.node_tasks.get(item.stream):
                    # The node's own task is finishing its previous item: it
                    # carries on with this one, no new task and no loop turn.
                    self._next_item[item.stream] = (item, attempt)
                else:
                    task = asyncio.create_task(self._run_node(item, attempt))
                    self.node_tasks[item.stream] = task
            case AckCommand(entry_id=entry_id):
                self.pending_acks.append(entry_id)
                self.outbox_ready.set()
            case DeadLetterCommand(item=item, reason=reason):
                self.spawn(self.queue.dead_letter(item, reason))
                self.room_ready.set()
            case ReleaseCommand(entry_ids=ids, started=started):
                self.spawn(self.queue.release(list(ids), started=started))
            case WakeAtCommand(at=at):
                asyncio.get_running_loop().call_at(at, self.dispatch, TimerTick())
            case PublishEventCommand(event_type=event_type, data=data):
                self.bus.publish(event_type, data)
            case _:
                assert_never(command)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run an effect in the background, keeping a reference and logging failures."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._effect_done)

    def _effect_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("engine effect failed: %r", task.exception())
            self.bus.publish("queue_unavailable", {"error": repr(task.exception())})

    def has_effects(self) -> bool:
        return bool(self._tasks)

    async def drain_effects(self) -> None:
        while self._tasks:
            await asyncio.gather(*tuple(self._tasks), return_exceptions=True)

    # -- running nodes ----------------------------------------------------------

    async def _run_node(self, item: WorkItem, attempt: int) -> None:
        """Run ``item`` and then, in the same task, whatever the reducer starts
        next on this node; yields to other tasks every few items."""
        stream = item.stream
        streak = 0
        # ``mediaflow.save_artifact`` without a store saves into the flow's (this
        # task's context only; threads started with ``to_thread`` inherit it).
        with use_store(self.store):
            while True:
                await self._run_item(item, attempt)
                next_item = self._next_item.pop(stream, None)
                if next_item is None:
                    return
                item, attempt = next_item
                streak += 1
                if streak >= YIELD_EVERY:
                    streak = 0
                    await asyncio.sleep(0)

    async def _run_item(self, item: WorkItem, attempt: int) -> None:
        node_id = item.stream.node
        node = self.nodes[node_id]
        is_source = item.kind == "source"
        info = ItemInfo(item.entry_id, item.seq, item.deliveries)
        if is_source:
            inputs: dict[str, Any] = {}
            self.bus.publish(
                "source_started",
                {"flow": self.spec.name, "node": node_id, "redelivery": item.redelivery},
            )
        else:
            payload = item.payload
            inputs = {payload["port"]: decode_value(payload["value"])}
            self.latency.record(node_id, time.time() - payload["at"])
        error: str | None = None
        try:
            if self.pending_acks and (item.deliveries > 1 or item.stream in self.state.careful):
                # After a crash: commit the acks of finished items before the
                # next one runs, so if it kills the process again only it is
                # delivered once more (MAX_DELIVERIES counts attempts, not
                # acks lost with the process).
                await self.flush()
            ctx = RunContext(self, node_id, inputs, info)
            try:
                outputs = await node.run(ctx)
                if outputs:
                    for port, value in outputs.items():
                        await ctx.emit(port, value)
            finally:
                ctx.release_pins()  # what the node saved and did not publish, it dropped
        except asyncio.CancelledError:
            if not (is_source and self.stopping):
                error = "cancelled while stopping"
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning(
                "node %r failed on item %s (attempt %d): %s",
                node_id,
                item.entry_id,
                attempt,
                error,
                exc_info=not isinstance(exc, TypeError | ValueError | KeyError),
            )
        if is_source:
            self.bus.publish(
                "source_ended", {"flow": self.spec.name, "node": node_id, "error": error}
            )
        self.finished_items += 1
        self.dispatch(NodeFinishedTick(item.stream, item.entry_id, error))
        if item.stream not in self.state.caught_up:
            # Room freed in a line whose work waits on disk: the claimer may fetch.
            self.room_ready.set()

    # -- emissions --------------------------------------------------------------

    async def emit(
        self,
        node_id: str,
        port: str,
        value: Any,
        *,
        item: int | None = None,
        held: Held | None = None,
    ) -> None:
        """Journal ``value`` emitted by ``node_id`` on ``port`` for every reader.

        ``item`` is the ``seq`` of the input item the node was running (None for a
        source). The emission's identity, ``{"seq": n, "item": item}`` (``seq``
        counts the port's emissions in this run from 1), goes with the latest value
        to live views (``latest`` events, ``/api/flows``) and is not journaled.

        The value joins this process's next group commit (one transaction for
        every emission of an event-loop turn, the acks of finished items and
        the latest values); readers receive it once that commit has landed.
        ``emit`` waits only when the group is full (:data:`OUTBOX_LIMIT`);
        ``flush`` waits for the commit itself. Raises ``KeyError`` for an
        unknown port and :class:`~mediaflow.media.PortKindError` for a value of
        the wrong kind, before anything is journaled.

        A reference always rides in the group commit, on a port nobody reads
        too (as the port's latest value): a node forwarding a reference then
        never leaves it only in memory once its input is acked. ``held`` are
        the GC pins of the emitting run (:mod:`.pins`); the pin of an emitted
        reference passes to the commit that carries it.
        """
        kinds = self.spec.nodes[node_id].output_kinds
        if port not in kinds:
            raise KeyError(
                f"node {node_id!r} has no output port {port!r} (it has: {', '.join(kinds)})"
            )
        value = check_port_value(node_id, port, kinds[port], value)
        encoded = encode_value(value)
        key = (node_id, port)
        seq = self._emissions[key] = self._emissions.get(key, 0) + 1
        ident = {"seq": seq} if item is None else {"seq": seq, "item": item}
        self.latest_values[key] = encoded
        self.latest_ids[key] = ident
        self.latest_events.offer(node_id, port, encoded, ident)
        if self.jsonl is not None:
            self.loops.write_jsonl(node_id, port, encoded)
        if held and isinstance(value, MediaRef):
            pin = held.pop(value.digest, None)
            if pin is not None:
                self.outbox_pins.append(pin)
        route = self.routes.get(key)
        if not route:
            if isinstance(value, MediaRef):
                # A reference nobody reads: the state keeps it, committed with
                # the acks of this turn (the lazy flush could land after them).
                self.outbox_latest[(self.spec.name, node_id, port)] = encoded
                self.outbox_ready.set()
            else:
                # Nobody reads it: only the state keeps it, flushed in batches.
                self.dirty_latest[key] = encoded
        else:
            now = time.time()
            source = f"{node_id}.{port}"
            for stream, target_port in route:
                payload = {"src": source, "port": target_port, "value": encoded, "at": now}
                self.outbox.append((stream, payload))
            # The state moves with the journal: a resumed source continues
            # exactly after its last committed value.
            self.outbox_latest[(self.spec.name, node_id, port)] = encoded
            self.outbox_ready.set()
            self.emissions_ready.set()
            if len(self.outbox) >= OUTBOX_LIMIT:
                await self.flush()
                return
        # The embedded queue commits without suspending, so a source in a tight
        # loop would starve the commit and the readers: yield every few values.
        self._unyielded += 1
        if self._unyielded >= YIELD_EVERY:
            self._unyielded = 0
            await asyncio.sleep(0)

    async def flush(self) -> None:
        """Commit every emission and ack buffered so far; returns once durable.

        Raises :class:`~mediaflow.queue.contract.QueueError` if the queue fails;
        the buffered work stays buffered for the next attempt.
        """
        async with self._flush_lock:
            if not self.outbox and not self.pending_acks and not self.outbox_latest:
                return
            batch, self.outbox = self.outbox, []
            latest, self.outbox_latest = self.outbox_latest, {}
            acks, self.pending_acks = self.pending_acks, []
            pins, self.outbox_pins = self.outbox_pins, []
            try:
                await self._commit(batch, latest, acks)
            except BaseException:
                self.outbox[:0] = batch
                self.outbox_latest = {**latest, **self.outbox_latest}
                self.pending_acks[:0] = acks
                self.outbox_pins[:0] = pins
                raise
            for pin in pins:
                self.pins.give_back(pin)

    async def _commit(
        self,
        batch: list[tuple[StreamKey, dict[str, Any]]],
        latest: dict[tuple[str, str, str], Any],
        acks: list[str],
    ) -> None:
        if not batch:
            if acks and latest:
                # One transaction: a reference a node forwarded to a port nobody
                # reads must be in the state before its input is acked.
                await self.queue.enqueue([], ack=acks, latest=latest)
            elif acks:
                await self.queue.ack(acks)
            elif latest:
                await self.queue.put_latest(latest)
            return
        state = self.state
        room: dict[StreamKey, int] = {}
        behind: set[StreamKey] = set()
        items = []
        for stream, payload in batch:
            if stream not in room:
                room[stream] = local_room(state, stream)
            claim = stream not in behind and room[stream] > 0
            if claim:
                room[stream] -= 1
            else:
                behind.add(stream)
            items.append(NewItem(stream, "emission", payload, claim=claim))
        if behind:
            self.mark_behind(frozenset(behind))
        stored = await self.queue.enqueue(items, claim_for=self.consumer, ack=acks, latest=latest)
        claimed = tuple(item for item in stored if item.deliveries > 0)
        if len(claimed) < len(stored):
            # The queue keeps an item ready when older work of its stream is
            # (another process's, say): that stream is behind too.
            refused = {i.stream for i in stored if i.deliveries == 0} - behind
            if refused:
                self.mark_behind(frozenset(refused))
        if claimed:
            self.dispatch(ItemsArrivedTick(claimed))

    def horizon(self) -> float:
        """The GC horizon of this run (see :mod:`.pins`): the earliest start of a
        save whose reference a node still holds unpublished, or now."""
        return self.pins.horizon(time.time())

    def has_unflushed(self) -> bool:
        return bool(self.outbox or self.pending_acks or self.outbox_latest)

    def behind_epoch(self, stream: StreamKey) -> int:
        return self._behind_epoch.get(stream, 0)

    def mark_behind(self, streams: frozenset[StreamKey]) -> None:
        """Work for ``streams`` is on disk again (a reclaim): claim it before new work."""
        for stream in streams:
            self._behind_epoch[stream] = self._behind_epoch.get(stream, 0) + 1
        self.dispatch(BacklogBehindTick(streams))
        self.room_ready.set()

    def on_claimed(self, items: list[WorkItem], drained: frozenset[StreamKey]) -> None:
        self.dispatch(ItemsArrivedTick(tuple(items), drained))
