"""The work-queue contract every backend implements.

Work is organised in *streams*, one per consumer node of a flow
(``StreamKey(flow, node)``), so a slow node's backlog waits on disk while a
fast node keeps claiming its own. Within a stream, items are claimed in the
order they were committed (``seq`` grows by one per item in a stream).

Delivery is at-least-once: a claimed item stays pending until ``ack``; a
consumer keeps it alive with ``touch``; ``reclaim_stale`` hands items whose
consumer stopped touching them back to ready, and the next claim counts one
more delivery. A parked flow's items are not claimed until it is unparked
(``unpark(flow, steps=n)`` lets exactly ``n`` more through, for
single-stepping).

Items arrive only in group commits (:meth:`WorkQueue.commit`): runs of values
per edge (and single items, such as a run's source items), claimed, acked and
recorded as latest values in one transaction, so a backend can store and hand
out a run with a few operations, not a few per item.

Executors of one flow (``mediaflow run`` and any ``mediaflow worker``) share
its *ordered* streams through leases (:meth:`WorkQueue.lease`): one holder
per stream at a time, so a stream's items run in order on one process.

An item delivered too often is dead-lettered (:meth:`Delivery.dead_letter`);
an operator reads dead letters (:meth:`WorkQueue.dead_letters`,
:meth:`WorkQueue.dead_letter_of`), puts one back to run again
(:meth:`WorkQueue.requeue_dead_letter`) or discards it
(:meth:`WorkQueue.delete_dead_letter`), naming it by :attr:`DeadLetter.id`.

Storage lifecycle: :meth:`WorkQueue.live_digests` tells garbage collection
which artifacts the queue still references; :meth:`WorkQueue.trim_dead_letters`
and :meth:`WorkQueue.forget_flow` keep what a long-running flow leaves behind
bounded.

Every method may raise :class:`QueueUnavailable` when the backend cannot be
reached; the engine reports that and retries.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from mediaflow.queue.items import (
    DeadLetter,
    EmissionRun,
    ItemKind,
    LeaseTable,
    NewItem,
    QueueError,
    QueueStats,
    QueueUnavailable,
    StreamBacklog,
    StreamKey,
    WorkItem,
)

__all__ = [
    "DeadLetter",
    "DeadLetters",
    "Delivery",
    "EmissionRun",
    "Gate",
    "Inspection",
    "ItemKind",
    "LatestValues",
    "LeaseTable",
    "Leases",
    "NewItem",
    "QueueError",
    "QueueStats",
    "QueueUnavailable",
    "Retention",
    "StreamBacklog",
    "StreamKey",
    "WorkItem",
    "WorkQueue",
]


@runtime_checkable
class Delivery(Protocol):
    """Moving items through streams: group commits, claims, acks, redelivery and
    dead-lettering (the engine's executor, journal and loops)."""

    async def commit(
        self,
        batch: Sequence[EmissionRun | NewItem],
        *,
        claim_for: str | None = None,
        ack: Sequence[str] = (),
        latest: Mapping[tuple[str, str, str], Any] | None = None,
    ) -> list[WorkItem]:
        """The one way onto the queue: a group commit of runs of emissions, single
        items, acks and latest values in ONE transaction, all or nothing; returns
        after it is durable.

        - Entries of ``batch`` are appended in the order given (two entries of
          one stream keep their order), ``seq`` gap-free per stream. A run's
          values become ``kind="emission"`` items of ``run.stream``, each stored
          payload decoding to exactly ``{"src": run.src, "port": run.port,
          "value": value, "at": run.at}`` (``at`` exact, not rounded); a
          :class:`NewItem` becomes one item of its kind and payload (a run's
          source items, for instance).
        - With ``claim_for``, the first ``run.claim`` values of a run, and a
          ``NewItem`` whose ``claim`` is True, are claimed for that consumer at
          once (``deliveries`` 1), unless the stream's flow is parked, older
          items of the stream are ready (they must not be overtaken), or another
          consumer holds a live :meth:`lease` on the stream. Once an item of a
          stream is left ready by this call, no later item of that stream in
          this call is claimed.
        - ``ack`` acknowledges pending items (as :meth:`ack`) and ``latest``
          records the newest value per ``(flow, node, port)`` (as
          :meth:`put_latest`: a resumed source knows exactly where it was), in
          the same transaction.

        Returns, in batch order, each ``NewItem`` as stored (``deliveries`` 1
        if claimed, 0 if left ready) and each run's claimed values only, each
        run's in ``seq`` order: a run's caller has its values, and building
        items it left ready would cost the hot path. A claimed value's
        ``payload`` is a dict equal to the stored JSON's decoding, holding the
        caller's value objects themselves (nothing is decoded).

        An empty call (no entries, acks or latest values) returns ``[]``
        without a transaction; acks or latest values alone are committed as
        one. Raises ``ValueError`` if a run's ``claim`` is outside
        ``0..len(values)``, ``TypeError`` or ``ValueError`` if a value or
        payload is not JSON-serialisable, in both cases before writing
        anything; :class:`QueueUnavailable` (nothing written) as every method
        does.
        """
        ...

    async def claim(self, consumer: str, wants: Mapping[StreamKey, int]) -> list[WorkItem]:
        """Claim up to ``wants[stream]`` ready items from each stream, oldest first;
        never waits for work (``[]`` when none is ready).

        Skips parked flows (except for the steps an ``unpark`` allowed), and
        streams another consumer holds a live :meth:`lease` on: a claim sent before
        the lease moved must not read past what the new holder was handed back
        (the same holds for claiming in a commit).
        """
        ...

    async def ack(self, entry_ids: Sequence[str]) -> int:
        """Remove finished items; return how many were pending. Unknown ids are ignored.

        Like XACK, a pending item is removed whichever consumer holds it now.
        """
        ...

    async def touch(self, consumer: str, entry_ids: Sequence[str]) -> int:
        """Reset the idle time of items ``consumer`` holds; return how many it still holds."""
        ...

    async def reclaim_stale(self, idle_ms: int) -> list[WorkItem]:
        """Release items idle for at least ``idle_ms``: they become ready again
        for whoever claims next, which counts one more delivery. Returns them, in
        stream order, with ``deliveries`` as now stored (the next claim adds one).
        """
        ...

    async def release(self, entry_ids: Sequence[str], *, started: bool = True) -> int:
        """Hand back items without acking, e.g. on a clean shutdown.

        With ``started`` False the items were claimed but never run (they waited
        in a node's line), so the delivery their claim counted is taken back:
        ``deliveries`` feeds the poison-item limit and must count real attempts.
        """
        ...

    async def release_consumer(self, consumer: str) -> int:
        """Hand back every item ``consumer`` holds, now (it is known to be dead,
        e.g. a killed process on this host); the next claim counts a redelivery.
        Every delivery stays counted: nothing tells which items the dead
        consumer had started. Its leases and memberships go too."""
        ...

    async def dead_letter(self, item: WorkItem, reason: str) -> None:
        """Take ``item`` out of its stream into the dead-letter list (an item
        delivered too often); an operator handles it through :class:`DeadLetters`."""
        ...


@runtime_checkable
class Leases(Protocol):
    """Sharing a flow's ordered streams among executors (the lease round)."""

    async def lease(
        self,
        flow: str,
        consumer: str,
        *,
        ttl_ms: int,
        hold: Sequence[StreamKey] = (),
        acquire: Sequence[StreamKey] = (),
        release: Sequence[StreamKey] = (),
        leave: bool = False,
    ) -> LeaseTable:
        """One atomic step of sharing ``flow``'s ordered streams among executors.

        ``consumer`` is recorded as a live member of the flow for ``ttl_ms``
        (removed, with all its leases, if ``leave``); its leases on ``hold``
        are renewed for ``ttl_ms`` (one it lost meanwhile stays lost); every
        stream of ``acquire`` that nobody holds, or whose lease expired,
        becomes its lease, and the stream's items still pending to another
        consumer (the holder that lost it) are handed back to ready, keeping
        their deliveries, so the new holder runs them first and in order;
        leases on ``release`` are dropped. Expiry is judged by the backend's
        clock. Returns the flow's live leases and members after the step.
        """
        ...


@runtime_checkable
class Gate(Protocol):
    """Holding a flow's items back: pause, resume and single-step."""

    async def park(self, flow: str) -> None:
        """Stop handing out ``flow``'s items until :meth:`unpark`."""
        ...

    async def unpark(self, flow: str, *, steps: int | None = None) -> None:
        """Resume ``flow``; with ``steps``, let exactly that many more items through
        and stay parked afterwards."""
        ...

    async def parked(self) -> dict[str, int | None]:
        """Parked flows and, for each, the steps it may still hand out (None: none)."""
        ...


@runtime_checkable
class LatestValues(Protocol):
    """The newest value per output port: a flow's state, not a delivery path."""

    async def put_latest(self, latest: Mapping[tuple[str, str, str], Any]) -> None:
        """Record the newest JSON value of each ``(flow, node, port)``: the flow's
        state ("what is the camera showing now"), not a delivery path."""
        ...

    async def latest(self, flow: str) -> dict[tuple[str, str], Any]:
        """The newest recorded value of each ``(node, port)`` of ``flow``."""
        ...


@runtime_checkable
class DeadLetters(Protocol):
    """What an operator does with items taken out of circulation
    (:meth:`Delivery.dead_letter`): read, requeue or discard them."""

    async def dead_letters(self, flow: str | None = None, limit: int = 100) -> list[DeadLetter]:
        """The newest dead letters, optionally of one flow, newest first."""
        ...

    async def dead_letter_of(self, flow: str, dead_id: str) -> DeadLetter | None:
        """The dead letter of ``flow`` that ``dead_id`` names (see
        :attr:`DeadLetter.id`), or None if ``flow`` has none by that id: never
        had, requeued, deleted, trimmed, of another flow, or an id that is not
        one this backend makes (a malformed id is not an error)."""
        ...

    async def requeue_dead_letter(self, flow: str, dead_id: str) -> WorkItem | None:
        """Put the item of ``flow``'s dead letter ``dead_id`` back in its stream,
        ready, and remove the dead letter, in ONE transaction; return the item
        as now stored, or None (and change nothing) if ``flow`` has no such dead
        letter (as :meth:`dead_letter_of` answers None).

        The item keeps its kind, payload and ``deliveries``: the next claim
        counts one more, so it runs again marked as a redelivery (and the
        poison-item limit sees every attempt). It goes to the back of its
        stream with a new ``entry_id`` and ``seq``, behind every item waiting
        there (it does not overtake them); ``enqueued_at`` is the time of the
        requeue. In a parked flow it waits, like any ready item, until the flow
        is unparked (or stepped). Garbage collection sees its references
        throughout (:meth:`live_digests` finds them in the dead letter or in
        the item, never in neither).

        Counted as one more enqueued item (:attr:`QueueStats.enqueued`), not as
        one less dead-lettered; ``QueueStats.extra["requeued"]`` counts requeues.
        """
        ...

    async def delete_dead_letter(self, flow: str, dead_id: str) -> bool:
        """Discard ``flow``'s dead letter ``dead_id``; return whether there was one
        (False, as :meth:`dead_letter_of` answers None, for an unknown, other
        flow's or malformed id)."""
        ...


@runtime_checkable
class Inspection(Protocol):
    """Read-only views of waiting work and counters (metrics, the API, the CLI)."""

    async def backlog(self) -> dict[StreamKey, StreamBacklog]:
        """Waiting work per stream (streams with nothing waiting may be omitted)."""
        ...

    async def backlog_flows(self) -> dict[str, int]:
        """Unacked items per flow."""
        ...

    async def stats(self) -> QueueStats: ...


@runtime_checkable
class Retention(Protocol):
    """What garbage collection and forgetting a flow need from the queue."""

    def live_digests(self, *, batch: int = 1000) -> AsyncIterator[list[str]]:
        """Every artifact digest the queue holds, in lists (an async generator).

        A digest is any ``sha256:`` + 64 lowercase hex string anywhere in the
        stored JSON (conservative: something that merely looks like one is
        kept too) of items in every state (ready, pending, parked flows'
        included), dead letters and latest values.

        The whole answer comes from ONE consistent snapshot of the backend,
        taken before the first list is yielded: a node that forwards a
        reference acks its input and enqueues its output in one transaction,
        so reading the old item and the new one at different moments could
        see neither, and the sweep would delete a referenced artifact. Writers
        are not held up meanwhile.

        Memory stays bounded: each list holds the distinct digests of at most
        ``batch`` stored rows; a digest may recur across lists (the consumer
        deduplicates). Blocking reads run off the event loop. Implementations
        are async generators: a consumer that stops early closes it
        (``contextlib.aclosing``) to end the snapshot at once rather than when
        the generator is collected.
        """
        ...

    async def trim_dead_letters(self, *, before: float, keep_per_flow: int) -> int:
        """Delete dead letters that died before ``before`` (a Unix time), and any
        beyond the newest ``keep_per_flow`` of each flow; return how many went."""
        ...

    async def forget_flow(self, flow: str) -> dict[str, int]:
        """Drop a flow's latest values and dead letters; return how many of each
        went (keys ``"latest"`` and ``"dead_letters"``).

        Raises :class:`QueueError` naming the flow if items of it are still
        waiting (in any state): they reference its artifacts and would be
        delivered to a flow that no longer knows them.
        """
        ...


@runtime_checkable
class WorkQueue(Delivery, Leases, Gate, LatestValues, DeadLetters, Inspection, Retention, Protocol):
    """Every role at once: what a backend implements. Callers take the roles they use."""

    async def close(self) -> None:
        """Release connections; pending items stay pending."""
        ...
