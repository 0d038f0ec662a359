"""The :class:`~mediaflow.node.Context` a node's ``run`` receives, and what it reaches.

:class:`FlowEnv` holds what every context of one run shares (the journal, the
store, the pins, the bus, the live hub, the spec); the runner makes it once, so
a context per item costs a few slot assignments. :class:`RunContext` is the core a
node uses; :class:`RunMore`, its ``ctx.more``, what a node rarely needs.

A context also tracks, for garbage collection, the references its run saved
and has not yet made durable (see :mod:`mediaflow.engine.pins`): a save pins
the digest; emitting it hands the pin to the group commit that carries it;
``more.keep`` or ``more.hold`` releases it; the end of the run releases the rest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from mediaflow.config import EngineSettings
from mediaflow.engine.events import EventBus
from mediaflow.engine.journal import Journal
from mediaflow.engine.operate import FlowControls
from mediaflow.engine.outages import StoreOutages
from mediaflow.engine.pins import Held, Pins
from mediaflow.engine.services import Services
from mediaflow.flows import FlowSpec
from mediaflow.flows.registry import builtin_name
from mediaflow.live.hub import LiveHub
from mediaflow.media import MediaRef, decode_value
from mediaflow.node import ControlAction, ItemInfo, Wire
from mediaflow.queue.contract import WorkItem
from mediaflow.store import ArtifactStore
from mediaflow.store.info import Source
from mediaflow.timeline.events import TimelineEvent
from mediaflow.timeline.index import RecordedClip, TimelineIndex

HOLD_S: Final = 86400.0
"""How long a hold outlives a crash of its holder: ``ctx.more.hold`` keeps expire
after this, in case the node never got to ``unhold``."""
DAY_S: Final = 86400.0

T = TypeVar("T")


class FlowEnv:
    """What the contexts of one flow run share. ``run_id`` is set once the run
    is recorded; ``is_stopping(node)`` answers whether the run is shutting down
    or that node was told to end (a disabled flow's source, a reloaded one);
    ``services`` are the session's (``ctx.more.shared``); ``outages`` saves for
    the sources, riding out a store that is away; ``controls`` are the session's
    (``ctx.more.control``; None for a runner without a session)."""

    __slots__ = (
        "bus",
        "controls",
        "flow",
        "is_stopping",
        "journal",
        "live",
        "loggers",
        "outages",
        "pins",
        "run_id",
        "services",
        "spec",
        "store",
    )

    def __init__(
        self,
        spec: FlowSpec,
        *,
        journal: Journal,
        store: ArtifactStore,
        pins: Pins,
        bus: EventBus,
        live: LiveHub,
        services: Services,
        is_stopping: Callable[[str], bool],
        controls: FlowControls | None = None,
    ) -> None:
        self.spec = spec
        self.controls = controls
        self.flow = spec.name
        self.journal = journal
        self.store = store
        self.pins = pins
        self.bus = bus
        self.live = live
        self.services = services
        self.is_stopping = is_stopping
        self.outages = StoreOutages(self.flow, store, bus)
        self.run_id: str | None = None
        self.loggers = {node: logging.getLogger(f"mediaflow.node.{node}") for node in spec.nodes}

    def rewire(self, spec: FlowSpec) -> None:
        """The flow's nodes changed (a reload)."""
        self.spec = spec
        self.loggers = {node: logging.getLogger(f"mediaflow.node.{node}") for node in spec.nodes}


class RunContext:
    """Context for one node run (or a source's whole life). Cheap to create."""

    __slots__ = ("_cause", "_env", "_held", "_more", "_over", "_work", "inputs", "node")

    def __init__(
        self,
        env: FlowEnv,
        node: str,
        inputs: Mapping[str, Any],
        work: WorkItem | None,
        cause: int | None = None,
    ) -> None:
        self._env = env
        self.node = node
        self.inputs = inputs
        self._work = work
        # The input item this run is for (a source's run is for none): named by
        # its emissions and events so a viewer can tell which ones belong together.
        self._cause = cause
        # Digests this run saved and has not made durable; made by the first save,
        # so a run that saves nothing costs nothing.
        self._held: Held | None = None
        self._over = False
        self._more: RunMore | None = None

    @property
    def flow(self) -> str:
        return self._env.flow

    @property
    def item(self) -> ItemInfo | None:
        work = self._work
        if work is None:
            return None
        payload = work.payload
        src, at = payload.get("src"), payload.get("at")
        return ItemInfo(
            work.entry_id,
            work.seq,
            work.deliveries,
            src if isinstance(src, str) else "",
            float(at) if isinstance(at, int | float) else None,
        )

    @property
    def log(self) -> logging.Logger:
        return self._env.loggers[self.node]

    @property
    def redelivery(self) -> bool:
        return self._work is not None and self._work.deliveries > 1

    def emit(self, port: str, value: Any) -> Coroutine[Any, Any, None]:
        # The journal's coroutine itself, not one wrapping it: a frame less per value.
        return self._env.journal.emit(self.node, port, value, item=self._cause, held=self._held)

    async def save_artifact(
        self,
        data: Source,
        media_type: str,
        meta: Mapping[str, Any] | None = None,
    ) -> MediaRef:
        pins = self._env.pins
        started = time.time()  # before the store records saved_at (see engine.pins)
        token = pins.saving(started)
        work = self._work
        try:
            if work is not None and work.kind == "source":
                # A source cannot be run again where it was: it waits for a store that
                # is away, then carries on with the same seq (see engine.outages).
                ref = await self._env.outages.save(self.node, data, media_type, meta)
            else:
                ref = await self._env.store.save(data, media_type, meta)
        finally:
            pins.saved(token)
        if self._over:
            return ref  # saved by a task that outlived the run: nothing left to pin for
        if self._held is None:
            self._held = {}
        pins.take(self._held, ref.digest, started, time.time())  # no await since saved()
        return ref

    async def read_artifact(self, ref: MediaRef | str) -> bytes:
        return await self._env.store.read(ref)

    def end(self) -> None:
        """The run is over: the references it saved and did not make durable
        were dropped (see :mod:`mediaflow.engine.pins`), and later saves through
        it pin nothing. Called by the engine."""
        self._over = True
        if self._held:
            self._env.pins.release_all(self._held)

    def stopping(self) -> bool:
        return self._env.is_stopping(self.node)

    @property
    def more(self) -> RunMore:
        """What a node rarely needs (:class:`RunMore`), made on first use."""
        if self._more is None:
            self._more = RunMore(self)
        return self._more


class RunMore:
    """``ctx.more`` of a :class:`RunContext`: what a node rarely needs."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx

    @property
    def flow_dir(self) -> Path:
        """The flow file's directory (the working directory for flows built in Python);
        relative paths in node options are resolved against it."""
        path = self._ctx._env.spec.path
        return path.parent if path is not None else Path.cwd()

    @property
    def live(self) -> LiveHub:
        """The session's live hub (see :class:`~mediaflow.node.MoreContext`)."""
        return self._ctx._env.live

    def shared(self, make: Callable[[EngineSettings], T]) -> T:
        """The session's one ``make(settings)`` (see :class:`~mediaflow.node.MoreContext`)."""
        return self._ctx._env.services.shared(make)

    async def flush(self) -> None:
        await self._ctx._env.journal.flush()

    def keep(self, ref: MediaRef | str) -> None:
        """Record ``ref`` as a recording kept by this run (a ``run_artifact`` row of
        kind ``"recording"``): garbage collection leaves it for the flow's
        ``retention_days`` (forever without), but a disk cap may evict it, oldest
        first. Blocking SQLite write, small. Raises
        :class:`~mediaflow.store.ArtifactNotFound` for a digest never saved."""
        digest = ref.digest if isinstance(ref, MediaRef) else ref
        env = self._ctx._env
        if env.run_id is not None:
            days = env.spec.retention_days
            expires_at = None if days is None else env.store.clock() + days * DAY_S
            env.store.keep(env.run_id, digest, expires_at=expires_at, kind="recording")
        if self._ctx._held:
            env.pins.release(self._ctx._held, digest)

    def hold(self, ref: MediaRef | str) -> None:
        """Record that this node keeps using ``ref`` after the item that delivered
        it is acked (a ``run_artifact`` row of kind ``"hold"``): garbage
        collection and the disk cap leave it until :meth:`unhold`, or for
        :data:`HOLD_S` should the node never get there (a crash). Blocking
        SQLite write, small; call it before the item's run ends. Raises
        :class:`~mediaflow.store.ArtifactNotFound` for a digest never saved."""
        digest = ref.digest if isinstance(ref, MediaRef) else ref
        env = self._ctx._env
        if env.run_id is not None:
            expires_at = env.store.clock() + HOLD_S
            env.store.keep(env.run_id, digest, expires_at=expires_at, kind="hold")
        if self._ctx._held:
            env.pins.release(self._ctx._held, digest)

    def unhold(self, ref: MediaRef | str) -> None:
        """Drop this run's hold (or keep) of ``ref``: the node is done with it.
        Blocking SQLite write, small; unknown references are ignored."""
        digest = ref.digest if isinstance(ref, MediaRef) else ref
        if self._ctx._env.run_id is not None:
            self._ctx._env.store.unkeep(self._ctx._env.run_id, digest)

    def artifact_path(self, ref: MediaRef | str) -> Path:
        digest = ref.digest if isinstance(ref, MediaRef) else ref
        return self._ctx._env.store.path_for(digest)

    def temp_dir(self) -> Path:
        """A scratch directory for this node on the store's filesystem, so a file
        written there is saved by a link rather than a copy. Created on demand."""
        path = self._ctx._env.store.data_dir / "tmp" / self._ctx.node
        path.mkdir(parents=True, exist_ok=True)
        return path

    def publish(self, event_type: str, **data: Any) -> None:
        # ``item``: the seq of the input item being run, as on this run's emissions.
        cause = {} if self._ctx._cause is None else {"item": self._ctx._cause}
        self._ctx._env.bus.publish(
            event_type, {"flow": self._ctx.flow, "node": self._ctx.node, **cause, **data}
        )

    def _timeline(self) -> TimelineIndex:
        data_dir = self._ctx._env.store.data_dir
        return self._ctx._env.services.keyed(
            (TimelineIndex, data_dir), lambda: TimelineIndex.in_data_dir(data_dir)
        )

    def note_event(self, event: TimelineEvent, *, publish: bool = True) -> None:
        """Note ``event`` in the timeline index (see :class:`~mediaflow.node.MoreContext`)."""
        self._timeline().note_event(self._ctx.flow, self._ctx.node, event)
        if publish:
            fields = event.to_json()
            del fields["type"]  # the bus event's own type
            for optional in ("zone", "text", "snapshot"):  # what this type of event lacks
                if fields[optional] is None:
                    del fields[optional]
            self.publish(event.type, **fields)

    def note_clip(self, ref: MediaRef, start: float, end: float, sources: tuple[str, ...]) -> None:
        """Note a kept clip in the timeline index (see :class:`~mediaflow.node.MoreContext`)."""
        clip = RecordedClip(self._ctx.flow, self._ctx.node, start, end, ref, sources)
        self._timeline().note_clip(clip)

    def is_wired(self, port: str) -> bool:
        """Whether this node's input ``port`` is wired in the flow (optional inputs)."""
        return port in self._ctx._env.spec.nodes[self._ctx.node].inputs

    def has_readers(self, port: str) -> bool:
        """Whether any node in the flow reads this node's ``port`` (a camera encodes
        video segments only when someone reads them)."""
        return self._ctx._env.journal.has_readers(self._ctx.node, port)

    def latest(self, port: str) -> Any:
        """The newest value this node emitted on ``port`` (this run or a crashed one), or None."""
        encoded = self._ctx._env.journal.latest_values.get((self._ctx.node, port))
        return None if encoded is None else decode_value(encoded)

    def wires(self) -> dict[str, Wire]:
        """Every wired input port of this node and what it reads (see
        :class:`~mediaflow.node.MoreContext`)."""
        spec = self._ctx._env.spec
        node = spec.nodes[self._ctx.node]
        wires = {}
        for port, ref in node.inputs.items():
            producer = spec.nodes[ref.node]
            kind = producer.output_kinds[ref.port]
            wires[port] = Wire(ref.node, ref.port, kind, builtin_name(producer.node_class))
        return wires

    def _controls(self) -> FlowControls:
        controls = self._ctx._env.controls
        if controls is None:
            raise RuntimeError("this flow runs without a session: nothing controls it")
        return controls

    def flow_status(self) -> str:
        """The flow's status (see :class:`~mediaflow.node.MoreContext`)."""
        return self._controls().status()

    async def control(self, action: ControlAction) -> str:
        """Control the flow as the HTTP API does (see :class:`~mediaflow.node.MoreContext`)."""
        return (await self._controls().apply(action)).after.status
