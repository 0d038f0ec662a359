"""The journal: emitted values on their way to the queue, and the latest value per port.

:meth:`Journal.emit` checks a value against its port, records it as the
port's latest value (the flow's state, shown to live views with its identity)
and buffers it for every reader. :meth:`Journal.flush` is the group commit: one
queue transaction carries every emission buffered since the last one (as one
:class:`~mediaflow.queue.contract.EmissionRun` per edge and turn, not an
object per value), the acks of finished items and the latest values. How many
new emissions of each stream are claimed for this process in that same
transaction is the reducer's decision: the journal dispatches a
``CommitDueTick``, commits as its ``JournalCommand`` says and reports the
outcome (``CommittedTick`` or ``CommitFailedTick``). Readers receive a value
only once the commit carrying it has landed.

Bounded: at most :data:`OUTBOX_LIMIT` emissions wait for a commit (besides
those of the one commit in flight); an emitter that fills the outbox waits for
the commit (*block the producer*), for as long as the queue is unavailable if
need be: the commit loop retries the buffered work with its backoff, and
nothing buffered is dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

from mediaflow.engine.commands import Dispatch, JournalCommand, answer
from mediaflow.engine.events import LatestThrottle
from mediaflow.engine.pins import Held, Pin, Pins
from mediaflow.engine.queue_roles import EngineQueue
from mediaflow.engine.ticks import CommitDueTick, CommitFailedTick, CommittedTick
from mediaflow.flows import FlowSpec
from mediaflow.media import MediaRef, check_port_value, encode_value
from mediaflow.queue.contract import EmissionRun, QueueError, StreamKey

OUTBOX_LIMIT: Final = 1024
"""Emissions a group commit holds at most; an emitter that fills it waits."""
GUARD_KEY: Final = "$guard"
"""An emission of a guarded port travels as ``{"$guard": generation, "value": v}``:
a reader drops it if the source that emitted it was restarted since (see
:attr:`mediaflow.node.Node.guarded`)."""

EmissionObserver: TypeAlias = Callable[[str, str, Any], None]
"""Told ``(node, port, encoded value)`` of each emission as it is recorded, on the
event loop (see :meth:`Journal.subscribe`). It must not raise or block: it runs
inside the emitting node's item, and a failure there would fail the node."""

LatestKey = tuple[str, str, str]  # (flow, node, port)
_Told: TypeAlias = tuple[Any, Mapping[str, int]]  # a value for live views, and its identity


class _Port:
    """What the journal knows of one output port: its kind, its readers (stream
    and input port), its ``node.port`` name, its key among the latest values and
    how many values it emitted in this run. Made once per port."""

    __slots__ = ("emitted", "guarded", "kind", "latest_key", "node", "route", "src")

    def __init__(
        self,
        flow: str,
        node: str,
        port: str,
        kind: str,
        route: list[tuple[StreamKey, str]],
        guarded: bool = False,
    ) -> None:
        self.kind = kind
        self.route = route
        self.node = node
        self.src = f"{node}.{port}"
        self.latest_key: LatestKey = (flow, node, port)
        self.emitted = 0
        self.guarded = guarded


class _Run:
    """Consecutive emissions of one edge waiting for the commit (mutable, cheap)."""

    __slots__ = ("at", "port", "src", "stream", "values")

    def __init__(self, stream: StreamKey, src: str, port: str, at: float) -> None:
        self.stream = stream
        self.src = src
        self.port = port
        self.at = at
        self.values: list[Any] = []


class Journal:
    """Emissions, acks and latest values of one flow run, committed in groups.

    Everything runs on the event loop; :meth:`flush` suspends for the commit.
    """

    def __init__(
        self,
        spec: FlowSpec,
        *,
        queue: EngineQueue,
        consumer: str,
        dispatch: Dispatch,
        pins: Pins,
        latest_events: LatestThrottle,
        yield_every: int,
    ) -> None:
        """``yield_every``: a source in a tight loop yields the event loop after this
        many values (the embedded queue commits without suspending, so it would
        starve the commit and the readers); see ``EngineSettings.turn_items``."""
        self._queue = queue
        self._consumer = consumer
        self._dispatch = dispatch
        self._pins = pins
        self._latest_events = latest_events
        self._observers: list[EmissionObserver] = []
        self._ports: dict[tuple[str, str], _Port] = {}
        self.rewire(spec)
        # The generation of each running source with guarded ports: its
        # emissions carry it, and a reader drops those of an older one.
        self.guards: dict[str, str] = {}
        self.latest_values: dict[tuple[str, str], Any] = {}
        # Which emission each latest value is: ``{"seq": n}`` counting the port's
        # emissions in this run, plus ``"item"``, the seq of the input item the
        # node ran for. Live views show a value once however it reaches them.
        self.latest_ids: dict[tuple[str, str], dict[str, int]] = {}
        # The next group commit: runs of emissions, acks, latest values, pins.
        self._runs: list[_Run] = []
        self._tails: dict[StreamKey, _Run] = {}
        self._buffered = 0
        self._acks: list[str] = []
        self._latest: dict[LatestKey, Any] = {}
        self._outbox_pins: list[Pin] = []
        # Latest values of ports nobody reads, flushed lazily (flush_latest).
        self._dirty_latest: dict[LatestKey, Any] = {}
        # The newest value per port not yet durable, told to live views (``latest``
        # events) once the commit carrying it lands: a viewer never sees a value a
        # crash could take back, and sees each value once.
        self._untold: dict[tuple[str, str], _Told] = {}
        self._untold_lazy: dict[tuple[str, str], _Told] = {}
        self._lock = asyncio.Lock()
        self._unyielded = 0
        self._yield_every = yield_every
        self.ready = asyncio.Event()  # anything to commit
        self.emissions_ready = asyncio.Event()  # emissions to commit (ends an ack linger)
        self._landed = asyncio.Event()  # set by every commit that lands
        # Set by every commit that lands emissions; its one waiter, a box's
        # forwarder (mediaflow.forward), clears it before it looks for new items.
        self.emissions_landed = asyncio.Event()

    def subscribe(self, observer: EmissionObserver) -> None:
        """Tell ``observer`` of every value emitted from now on, before it is committed."""
        self._observers.append(observer)

    def rewire(self, spec: FlowSpec) -> None:
        """Route emissions as ``spec`` wires them (at start, and on a reload).

        A port kept by the new spec keeps its object, so what it buffered and
        counted stays; values buffered for a reader that is gone are still
        committed (the reload dead-letters them with the reason)."""
        routes: dict[tuple[str, str], list[tuple[StreamKey, str]]] = {}
        for edge in spec.edges:
            route = routes.setdefault((edge.source.node, edge.source.port), [])
            route.append((StreamKey(spec.name, edge.target.node), edge.target.port))
        ports: dict[tuple[str, str], _Port] = {}
        for node_id, node in spec.nodes.items():
            for port, kind in node.output_kinds.items():
                route = routes.get((node_id, port), [])
                out = self._ports.get((node_id, port))
                if out is None or out.kind != kind:
                    out = _Port(spec.name, node_id, port, kind, route)
                out.route = route
                out.guarded = port in node.node_class.guarded
                ports[(node_id, port)] = out
        self._ports = ports

    # -- values in -------------------------------------------------------------------

    def has_readers(self, node: str, port: str) -> bool:
        out = self._ports.get((node, port))
        return out is not None and bool(out.route)

    async def emit(
        self, node: str, port: str, value: Any, *, item: int | None, held: Held | None
    ) -> None:
        """Journal ``value`` emitted by ``node`` on ``port`` for every reader.

        ``item`` is the ``seq`` of the input item the node was running (None for a
        source): it goes into the emission's identity. Waits only when the outbox
        is full (for the commit, however long the queue is unavailable: see
        :meth:`flush_when_available`) or to yield the loop every ``yield_every``
        values. Raises ``KeyError`` for an unknown port and
        :class:`~mediaflow.media.PortKindError` for a value of the wrong kind,
        before anything is journaled.

        A reference always rides in the group commit, on a port nobody reads too
        (as the port's latest value): a node forwarding a reference then never
        leaves it only in memory once its input is acked. ``held`` are the GC
        pins of the emitting run (:mod:`.pins`); the pin of an emitted reference
        passes to the commit that carries it.
        """
        key = (node, port)
        out = self._ports.get(key)
        if out is None:
            ports = ", ".join(p for n, p in self._ports if n == node)
            raise KeyError(f"node {node!r} has no output port {port!r} (it has: {ports})")
        value = check_port_value(node, port, out.kind, value)
        encoded = encode_value(value)
        out.emitted += 1
        ident = {"seq": out.emitted} if item is None else {"seq": out.emitted, "item": item}
        self.latest_values[key] = encoded
        self.latest_ids[key] = ident
        for observer in self._observers:
            observer(node, port, encoded)
        is_ref = isinstance(value, MediaRef)
        if held and is_ref:
            pin = held.pop(value.digest, None)
            if pin is not None:
                self._outbox_pins.append(pin)
        if out.route:
            guard = self.guards.get(node) if out.guarded else None
            routed = encoded if guard is None else {GUARD_KEY: guard, "value": encoded}
            self._buffer(out, routed, encoded)
        elif is_ref:
            # A reference nobody reads: the state keeps it, committed with the
            # acks of this turn (the lazy flush could land after them).
            self._latest[out.latest_key] = encoded
            self._untold[key] = (encoded, ident)
            self.ready.set()
            return
        else:
            # Nobody reads it: only the state keeps it, flushed in batches.
            self._dirty_latest[out.latest_key] = encoded
            self._untold_lazy[key] = (encoded, ident)
            return
        self._untold[key] = (encoded, ident)
        if self._buffered >= OUTBOX_LIMIT:
            while self._buffered >= OUTBOX_LIMIT:  # other emitters may refill it
                await self.flush_when_available()
            return
        self._unyielded += 1
        if self._unyielded >= self._yield_every:
            self._unyielded = 0
            await asyncio.sleep(0)

    def _buffer(self, out: _Port, routed: Any, encoded: Any) -> None:
        if not self._runs:  # the first emission since the last commit
            self.ready.set()
            self.emissions_ready.set()
        src = out.src
        tails = self._tails
        for stream, port in out.route:
            run = tails.get(stream)
            if run is None or run.src != src or run.port != port:
                run = tails[stream] = _Run(stream, src, port, time.time())
                self._runs.append(run)
            run.values.append(routed)
        self._buffered += len(out.route)
        # The state moves with the journal: a resumed source continues exactly
        # after its last committed value.
        self._latest[out.latest_key] = encoded

    def ack(self, entry_ids: tuple[str, ...]) -> None:
        """Buffer acks of finished items for the next commit."""
        self._acks.extend(entry_ids)
        self.ready.set()

    # -- the group commit ------------------------------------------------------------

    def has_unflushed(self) -> bool:
        return bool(self._runs or self._acks or self._latest)

    def has_emissions(self) -> bool:
        return bool(self._runs)

    def pending_acks(self) -> int:
        return len(self._acks)

    async def flush(self) -> None:
        """Commit every emission and ack buffered so far; returns once durable.

        Raises :class:`~mediaflow.queue.contract.QueueError` if the queue fails;
        the buffered work stays buffered for the next attempt.
        """
        async with self._lock:
            if not self.has_unflushed():
                return
            runs, self._runs, self._tails, self._buffered = self._runs, [], {}, 0
            latest, self._latest = self._latest, {}
            acks, self._acks = self._acks, []
            pins, self._outbox_pins = self._outbox_pins, []
            untold, self._untold = self._untold, {}
            claims: Mapping[StreamKey, int] = {}
            if runs:
                plan = answer(self._dispatch(CommitDueTick(_counts(runs))), JournalCommand)
                claims = plan.claims if plan is not None else {}
            try:
                claimed = await self._queue.commit(
                    _emission_runs(runs, claims),
                    claim_for=self._consumer,
                    ack=acks,
                    latest=latest,
                )
            except BaseException:
                self._runs[:0] = runs
                self._buffered += sum(len(run.values) for run in runs)
                self._latest = {**latest, **self._latest}
                self._acks[:0] = acks
                self._outbox_pins[:0] = pins
                self._untold = {**untold, **self._untold}
                if runs:
                    self._dispatch(CommitFailedTick())
                raise
            self._landed.set()
            if runs:
                self.emissions_landed.set()
            self._tell(untold)
            for pin in pins:
                self._pins.give_back(pin)
            if runs:
                self._dispatch(CommittedTick(tuple(claimed)))

    async def flush_when_available(self) -> None:
        """Commit what is buffered, as :meth:`flush`, but while the queue is
        unavailable wait instead of raising: until a commit lands (the commit
        loop retries with its backoff and reports the outage), which carries
        everything buffered before it. For callers that must not fail because
        the queue is away: an emitter held back by a full outbox, a node waiting
        for earlier acks to be durable. May be cancelled (the work stays
        buffered); raises what :meth:`flush` raises other than ``QueueError``.
        """
        while True:
            try:
                await self.flush()
                return
            except QueueError:
                # No await since the failure: the next commit to land is a later one.
                self._landed.clear()
            await self._landed.wait()

    async def flush_latest(self) -> None:
        """Record the latest values of ports nobody reads (batched, every half second)."""
        if self._dirty_latest:
            batch, self._dirty_latest = self._dirty_latest, {}
            untold, self._untold_lazy = self._untold_lazy, {}
            await self._queue.put_latest(batch)  # a failed batch is not told either
            self._tell(untold)

    def _tell(self, untold: Mapping[tuple[str, str], _Told]) -> None:
        """Offer durable values to live views (throttled per port, but a text port's
        lines, which a view lists, each)."""
        for key, (encoded, ident) in untold.items():
            out = self._ports.get(key)
            every = out is not None and out.kind == "text"
            self._latest_events.offer(key, encoded, ident, every=every)


def _counts(runs: list[_Run]) -> dict[StreamKey, int]:
    counts: dict[StreamKey, int] = {}
    for run in runs:
        counts[run.stream] = counts.get(run.stream, 0) + len(run.values)
    return counts


def _emission_runs(runs: list[_Run], claims: Mapping[StreamKey, int]) -> list[EmissionRun]:
    """The runs as the queue takes them; a stream's claims go to its first values."""
    left = dict(claims)
    out: list[EmissionRun] = []
    for run in runs:
        claim = min(len(run.values), left.get(run.stream, 0))
        if claim:
            left[run.stream] -= claim
        out.append(EmissionRun(run.stream, run.src, run.port, run.values, run.at, claim))
    return out
