"""The records of the work queue: keys, items, runs, dead letters, backlog, leases
and stats, and its errors. Pure data; the operations are in
:mod:`mediaflow.queue.contract`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeAlias

ItemKind: TypeAlias = Literal["emission", "source"]


class QueueError(Exception):
    """Base class of work-queue errors."""


class QueueUnavailable(QueueError):
    """The backend could not be reached or answered with an error."""


class StreamKey(NamedTuple):
    """Where an item waits: the flow and the node that will consume it."""

    flow: str
    node: str

    def __str__(self) -> str:
        return f"{self.flow}/{self.node}"


# NewItem and WorkItem are made once per item on the hot path: plain slotted
# dataclasses build ~4x faster than frozen ones (whose __init__ goes through
# object.__setattr__). Treat them as immutable all the same; unsafe_hash keeps
# them hashable as the frozen versions were.


@dataclass(slots=True, unsafe_hash=True)
class NewItem:
    """A single item to commit (:meth:`WorkQueue.commit`). ``payload`` must be
    JSON-serialisable.

    ``claim`` = False keeps the item ready on disk even when ``commit`` is
    called with ``claim_for`` (its reader has older work waiting, or no room).
    Not to be changed once made (see above why it is not frozen).
    """

    stream: StreamKey
    kind: ItemKind
    payload: Mapping[str, Any]
    claim: bool = True


@dataclass(slots=True, unsafe_hash=True)
class WorkItem:
    """An item as claimed from the queue.

    ``entry_id`` is opaque and unique within the backend; ``seq`` orders items
    within one stream; ``deliveries`` counts claims, this one included, so a
    value above 1 marks a redelivery. Not to be changed once made (see above
    why it is not frozen): ``dataclasses.replace`` makes a changed copy.
    """

    entry_id: str
    stream: StreamKey
    kind: ItemKind
    payload: Mapping[str, Any]
    seq: int
    deliveries: int
    enqueued_at: float

    @property
    def redelivery(self) -> bool:
        return self.deliveries > 1


@dataclass(frozen=True, slots=True)
class EmissionRun:
    """Consecutive emissions of one edge within one group commit (see
    :meth:`WorkQueue.commit`): made once per run, not per item.

    Each value becomes one ``kind="emission"`` item of ``stream`` whose payload
    is ``{"src": src, "port": port, "value": value, "at": at}``.
    """

    stream: StreamKey
    """The reader's stream."""
    src: str
    """``"<node>.<port>"`` that emitted the values."""
    port: str
    """The reader's input port."""
    values: Sequence[Any]
    """JSON-ready values (dicts with str keys, lists, str, numbers, bools,
    None), in emission order."""
    at: float
    """``time.time()`` when the first of them was emitted."""
    claim: int = 0
    """How many of the first values to claim for ``commit``'s ``claim_for``
    (0 to ``len(values)``)."""


@dataclass(frozen=True)
class DeadLetter:
    """An item taken out of circulation, with the reason: what an operator reads
    before requeueing it (:meth:`WorkQueue.requeue_dead_letter`) or discarding it
    (:meth:`WorkQueue.delete_dead_letter`).

    ``item`` is the item as it was when it died (its ``deliveries`` count the
    attempts it had); ``dead_at`` is the Unix time of the ``dead_letter`` call.
    """

    item: WorkItem
    reason: str
    dead_at: float
    id: str = ""
    """Names this dead letter for as long as it exists: unique within the
    backend (across flows), never reused, the same from every handle and call.
    Opaque and URL-safe (ASCII digits and ``-``; no flow name in it), so
    ``/api/flows/{flow}/dead-letters/{id}`` can name it. Empty only for a
    DeadLetter made outside a backend."""

    @property
    def flow(self) -> str:
        return self.item.stream.flow

    @property
    def node(self) -> str:
        """The node the item was for."""
        return self.item.stream.node

    @property
    def deliveries(self) -> int:
        """How many times the item was delivered before it died."""
        return self.item.deliveries


@dataclass(frozen=True)
class StreamBacklog:
    """Waiting work of one stream: ``ready`` (claimable), ``pending`` (claimed,
    not acked), and the enqueue time of the oldest unacked item.

    ``delayed`` is always 0: no item is enqueued for later any more (issue 26
    removed the option, which had no production caller). It stays because the
    HTTP API's backlog and the metrics report it."""

    ready: int = 0
    pending: int = 0
    delayed: int = 0
    oldest_enqueued_at: float | None = None

    @property
    def total(self) -> int:
        return self.ready + self.pending + self.delayed


@dataclass(frozen=True)
class LeaseTable:
    """Who runs which ordered stream of a flow, as a :meth:`WorkQueue.lease` call
    left it: the live leases and the live executors (``members``, sorted)."""

    holders: Mapping[StreamKey, str] = field(default_factory=dict)
    members: tuple[str, ...] = ()
    taken_over: frozenset[StreamKey] = frozenset()
    """Streams this call acquired whose items pending to an earlier holder it
    handed back (they run again, first, as redeliveries)."""

    def held_by(self, consumer: str) -> frozenset[StreamKey]:
        return frozenset(s for s, holder in self.holders.items() if holder == consumer)


@dataclass(frozen=True)
class QueueStats:
    """Counters since the backend was created (persisted where the backend can)."""

    enqueued: int
    acked: int
    dead_lettered: int
    redelivered: int
    backlog: int
    parked_flows: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
