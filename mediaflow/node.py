"""The node API users subclass.

A node declares its ports as class attributes (``inputs`` and ``outputs``,
port name -> kind) and implements ``run``. A node with no inputs is a
*source*: the engine calls ``run`` once and keeps it running; it emits values
with ``await ctx.emit(port, value)``. Any other node is called once per item,
with the value the item carries in ``ctx.inputs``, and returns its outputs (a
dict, or ``None``) or emits them.

Keys of a ``[[node]]`` table in a flow file, other than ``id``, ``use``,
``connector`` and ``inputs``, arrive as keyword arguments of ``__init__``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar

from mediaflow.media import MediaRef

if TYPE_CHECKING:
    from mediaflow.config import EngineSettings
    from mediaflow.live.hub import LiveHub
    from mediaflow.timeline.events import TimelineEvent

T = TypeVar("T")

ControlAction = Literal["pause", "resume", "step", "disable", "enable"]
"""What a flow can be told, over HTTP (``POST /api/flows/{flow}/<action>``) or by a
node (``ctx.more.control``)."""


class DependencyAway(Exception):
    """Raised by a node's ``run`` when a service it depends on (a broker, a web
    service) is away: not reachable, or not answering in time. Not the item's
    fault: the engine runs the item again after a wait that grows (capped, like
    an artifact store that is away), costs it no attempt and never dead-letters it
    for this, so items wait in the queue, in order, until the service is back.
    ``dependency`` names the service in a short word (``"mqtt"``): the ``away``
    field of the ``cascade_retry`` events says it. Keep secrets out of the message.
    """

    def __init__(self, dependency: str, message: str) -> None:
        if not dependency:
            raise ValueError("DependencyAway needs the dependency's name")
        super().__init__(message)
        self.dependency = dependency


@dataclass(frozen=True)
class Wire:
    """Where one input port of a node is wired from: ``node.port`` of the flow,
    of ``kind``; ``builtin`` is the producer's built-in name (``"motion"``,
    ``"camera"``), None for a class of the user's own."""

    node: str
    port: str
    kind: str
    builtin: str | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """How the engine retries a node's failed items (:meth:`Node.retry_policy`).

    An item whose run raised runs again after ``retry_base_s``, doubled per failed
    run and capped at ``retry_max_s``, while the node's later items wait behind it;
    after ``max_attempts`` failed runs in one process it is dead-lettered. The
    engine-wide defaults are ``MEDIAFLOW_MAX_ATTEMPTS``, ``MEDIAFLOW_RETRY_BASE_S``
    and ``MEDIAFLOW_RETRY_MAX_S``. Raises ``ValueError`` for a value out of range."""

    max_attempts: int
    retry_base_s: float
    retry_max_s: float

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts!r}")
        if not 0 < self.retry_base_s <= self.retry_max_s:
            raise ValueError(
                "retry_base_s must be positive and at most retry_max_s, got "
                f"{self.retry_base_s!r} and {self.retry_max_s!r}"
            )


class ItemRefused(Exception):
    """Raised by ``run`` for an item no retry can get through (a receiver that
    refuses it for good): the item is dead-lettered at once, the message its reason,
    and the node goes on with its next item. Requeueing the dead letter runs it again."""


@dataclass(frozen=True)
class ItemInfo:
    """What a node may know about the item it runs for: ``source``, the output that
    emitted it (``"node.port"``) and ``emitted_at``, when (Unix seconds)."""

    entry_id: str
    seq: int
    deliveries: int
    source: str = ""
    emitted_at: float | None = None


class MoreContext(Protocol):
    """What a node rarely needs, behind ``ctx.more``: where the flow lives, the
    session's live hub and shared services, how long an artifact lives, what the
    flow wires, what this node said last and the flow's event bus."""

    @property
    def flow_dir(self) -> Path:
        """The flow file's directory; resolve relative paths in options against it."""
        ...

    @property
    def live(self) -> LiveHub:
        """The live feeds of this process (the session's): a camera opens its feed
        here, a microphone its sound; the server beside the session reads them."""
        ...

    def shared(self, make: Callable[[EngineSettings], T]) -> T:
        """The one instance of a service the nodes of this session share (a pool of
        worker processes, a loaded model): ``make(settings)``, called the first time
        any node asks with that ``make`` (an equal callable: a function or a
        classmethod, not a fresh lambda), under a lock, so keep it quick. When the
        session closes, after the nodes' teardown, its ``close()`` (if it has one)
        is called in a thread."""
        ...

    async def flush(self) -> None:
        """Wait until everything this process emitted so far is durable."""
        ...

    def keep(self, ref: MediaRef | str) -> None:
        """Keep ``ref`` as a recording of this run (a clip, a snapshot): garbage
        collection spares it for the flow's ``retention_days`` (``[flow]``
        table; forever without one), though a disk cap (``ARTIFACT_MAX_BYTES``)
        evicts the oldest recordings first. A small blocking SQLite write."""
        ...

    def hold(self, ref: MediaRef | str) -> None:
        """Hold ``ref`` while this node keeps using it after acking the item that
        delivered it (a recorder's segments until their clip is muxed): neither
        garbage collection nor the disk cap takes it until :meth:`unhold`, or a
        day should the node never get there. Call it during the run of that
        item. A small blocking SQLite write.

        Without it, a reference a node holds in memory is safe only while the
        item that carried it is unacked: once the run ends, the queue no longer
        names it, and it goes once nothing else does.
        """
        ...

    def unhold(self, ref: MediaRef | str) -> None:
        """Drop this run's hold of ``ref`` (see :meth:`hold`). A small blocking SQLite write."""
        ...

    def artifact_path(self, ref: MediaRef | str) -> Path:
        """Where the artifact's bytes live on this machine (read-only)."""
        ...

    def temp_dir(self) -> Path:
        """A scratch directory for this node on the store's filesystem."""
        ...

    def publish(self, event_type: str, **data: Any) -> None:
        """Put an event on the flow's event bus (``device_lost``, transcripts ...).

        The event carries ``flow``, ``node`` and, in a run for an input item,
        ``item`` (that item's ``seq``, as in the identity of this run's emissions:
        a live view joins an event to the value it is about by it)."""
        ...

    def note_event(self, event: TimelineEvent, *, publish: bool = True) -> None:
        """Note ``event`` in the timeline index (see :mod:`mediaflow.timeline.events`):
        when it starts, and again when it ends. With ``publish``, also put it on the
        event bus as an event of type ``event.type``. Blocking SQLite write, small."""
        ...

    def note_clip(self, ref: MediaRef, start: float, end: float, sources: tuple[str, ...]) -> None:
        """Note a kept clip of this recorder in the timeline index: ``[start, end)`` on
        the wall clock, recorded from ``sources``. Blocking SQLite write, small."""
        ...

    def is_wired(self, port: str) -> bool:
        """Whether this node's input ``port`` is wired in the flow (optional inputs)."""
        ...

    def has_readers(self, port: str) -> bool:
        """Whether any node in the flow reads this node's output ``port``."""
        ...

    def latest(self, port: str) -> Any:
        """The newest value this node emitted on ``port`` (also by a crashed earlier
        process of the same run), or None: a resumed source continues its ``seq``."""
        ...

    def wires(self) -> Mapping[str, Wire]:
        """Every wired input port of this node and what it reads (a sink that names
        what it publishes after the node and port it came from)."""
        ...

    def flow_status(self) -> str:
        """The flow's status as the API shows it: ``running``, ``paused``,
        ``disabled`` or ``stopping``."""
        ...

    async def control(self, action: ControlAction) -> str:
        """Pause, resume, step, disable or enable the flow through the same path as
        the HTTP API (one at a time per flow; asking for the state the flow is in
        changes nothing). Returns the flow's status after. Raises
        :class:`~mediaflow.engine.operate.FlowStateError` for an action the flow's
        state forbids (anything but ``enable`` on a disabled flow, a step while
        running, anything while stopping). A node must not wait on it from its own
        ``run``: a pause waits for nothing, but the node's item holds its stream."""
        ...


class Context(Protocol):
    """What the engine gives a node's ``run`` and ``setup``: the core every node
    uses; what a node rarely needs is behind :attr:`more`."""

    node: str
    inputs: Mapping[str, Any]

    @property
    def flow(self) -> str:
        """The flow's name."""
        ...

    @property
    def item(self) -> ItemInfo | None:
        """The item this run is for (``seq``, ``entry_id``, ``deliveries``); None in ``setup``."""
        ...

    @property
    def redelivery(self) -> bool:
        """True when this item was delivered before (after a crash or a reclaim)."""
        ...

    @property
    def log(self) -> Any:
        """This node's logger (``mediaflow.node.<id>``)."""
        ...

    async def emit(self, port: str, value: Any) -> None:
        """Journal ``value`` on ``port`` for every reader.

        The value joins the process's next group commit, which lands within an
        event-loop turn; readers receive it only after that. ``emit`` waits
        when the group is full. If the process dies before the commit lands,
        the value is lost with it, and a resumed source continues after the
        last committed one (``ctx.more.latest``). Raises
        :class:`~mediaflow.media.PortKindError` if ``value`` does not fit the
        port, ``KeyError`` if the node has no such output port.
        """
        ...

    async def save_artifact(
        self,
        data: bytes | Path | AsyncIterator[bytes],
        media_type: str,
        meta: Mapping[str, Any] | None = None,
    ) -> MediaRef:
        """Store bytes (or a file, streamed, or chunks) and return the reference.

        Until this run emits the reference (and the commit carrying it lands),
        keeps or holds it, or ends, garbage collection spares every artifact
        saved since this save began; after that the reference must be in a
        message, a keep or a hold to survive.

        In a source, a save that finds the artifact service away waits and tries
        again until it lands, so the source carries on with the same ``seq``. In
        any other node, the item is given back and costs no attempt.
        """
        ...

    async def read_artifact(self, ref: MediaRef | str) -> bytes:
        """The bytes of a stored artifact, whole (a large one: read its ``artifact_path``)."""
        ...

    def stopping(self) -> bool:
        """True once the flow is shutting down; long-running sources should return."""
        ...

    @property
    def more(self) -> MoreContext:
        """What a node rarely needs (:class:`MoreContext`)."""
        ...


class Node:
    """Base class of every node. Subclasses set ``inputs``/``outputs`` and ``run``."""

    inputs: ClassVar[Mapping[str, str]] = {}
    outputs: ClassVar[Mapping[str, str]] = {}
    guarded: ClassVar[frozenset[str]] = frozenset()
    """Output ports whose values go stale when this source restarts (a timer's
    firings): each emission carries the source's generation, and a reader's
    item from an earlier generation (a restarted or re-configured source) is
    dropped, not run (a ``stale_dropped`` event)."""
    ordered: ClassVar[bool] = True
    """Items reach ``run`` in the order they were emitted, on one executor at a
    time (the stream is leased). ``False`` for a node whose items are
    independent (a pure, CPU-bound transform): every executor of the flow
    claims its stream at once, which is how ``mediaflow worker`` speeds it up."""

    open_inputs: ClassVar[bool] = False
    """The node takes any input the flow wires to it, under any port name: each
    such port has the kind of the output wired to it (a sink that publishes
    whatever it is given). Its declared ``inputs`` may then be empty; at least
    one input must be wired. ``ctx.more.wires()`` tells the run what each is."""

    optional_inputs: ClassVar[frozenset[str]] = frozenset()
    """Input ports the flow may leave unwired (``ctx.more.is_wired`` tells the run);
    every other declared input must be wired."""

    @classmethod
    def ports(cls, options: Mapping[str, Any]) -> tuple[Mapping[str, str], Mapping[str, str]]:
        """The ``(inputs, outputs)`` port -> kind maps for a node built with ``options``.

        The class attributes by default. Override it when the ports depend on the
        options (a connector whose outputs depend on its device or file); an
        instance's own ``inputs``/``outputs`` still win once it is built. An
        exception raised here is reported as a problem with the flow.
        """
        return cls.inputs, cls.outputs

    @classmethod
    def retry_policy(cls, options: Mapping[str, Any]) -> RetryPolicy | None:
        """How the engine retries this node's failed items, for a node built with
        ``options`` (the flow file's keys); None, the default: the engine's settings.
        Called when the flow starts or is reloaded (a node given as an instance gets
        the answer for no options). An exception raised here is a problem with the flow."""
        return None

    async def setup(self, ctx: Context) -> None:
        """Called once before the first ``run``; open models or devices here."""

    async def run(self, ctx: Context) -> Mapping[str, Any] | None:
        """Process one item (or, for a source, run until done). Return outputs or None."""
        raise TypeError(f"{type(self).__name__} must implement run(ctx)")

    async def teardown(self) -> None:
        """Called once when the flow stops, even after an error."""

    @classmethod
    def is_source(cls) -> bool:
        """Whether the class declares no inputs (the engine runs it once, to the end)."""
        return not cls.inputs and not cls.open_inputs
