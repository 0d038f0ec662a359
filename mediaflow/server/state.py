"""What the HTTP service serves from: the store, the queue, the bus and the flows.

Two shapes, one class:

* ``mediaflow serve``: :meth:`AppState.for_serve` opens the data directory's
  store, queue and state store; flows are shown from what the state store
  and the queue recorded (last runs; latest values and backlog).
* ``mediaflow run --port N``: :meth:`AppState.for_session` serves next to a
  started :class:`~mediaflow.engine.session.FlowSession`, sharing its event bus
  and queue and reading its runner's live state.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from aiohttp import web

from mediaflow.config import SqliteSync
from mediaflow.engine.events import EventBus
from mediaflow.engine.state_store import StateStore
from mediaflow.live.hub import LiveHub
from mediaflow.queue import DeadLetters, Inspection, LatestValues, open_queue
from mediaflow.server.filecache import ArtifactCache
from mediaflow.server.queue_watch import QueueWatch
from mediaflow.server.settings import ServerSettings
from mediaflow.server.transfer import TransferStats
from mediaflow.store import ArtifactStore
from mediaflow.timeline.index import TimelineIndex

if TYPE_CHECKING:
    from mediaflow.engine.session import FlowSession
    from mediaflow.forward import ForwardStatus
    from mediaflow.gc import GcSettings

SessionWatcher = Callable[["FlowSession"], None]
"""Told of each session the state shows (the app's metrics feed on its runner)."""


class ServerQueue(Inspection, LatestValues, DeadLetters, Protocol):
    """The roles of the work queue the server's routes use: the backlog and
    stats (the API, ``/metrics``), latest values, an operator's dead letters;
    and ``close``, for a queue the state owns (``owns_backends``). It never
    claims, commits or parks: a session does that."""

    async def close(self) -> None:
        """Release connections (see :meth:`mediaflow.queue.WorkQueue.close`)."""
        ...


class Answered(NamedTuple):
    """One response as it was prepared (status included), for logs and tests.

    A named tuple: one is built for every response, and it costs less than a dataclass.
    """

    method: str
    path: str  # the request target as sent: not percent-decoded, query included
    status: int
    range: str | None


class AppState:
    """Everything the handlers share. Create before the app; :meth:`close` after it.

    ``settings`` None means the built-in :class:`ServerSettings` (the environment
    is read at the process boundary, :meth:`ServerSettings.from_env`, not here).
    ``owns_backends``: :meth:`close` also closes the queue (the serve case);
    a session's queue belongs to the session. ``gc_settings``: the storage
    lifecycle settings the process sweeps with, for ``/metrics`` (the disk cap);
    None when the caller did not say.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        settings: ServerSettings | None = None,
        store: ArtifactStore | None = None,
        queue: ServerQueue | None = None,
        bus: EventBus | None = None,
        live: LiveHub | None = None,
        owns_backends: bool = False,
        gc_settings: GcSettings | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.gc_settings = gc_settings
        self.settings = settings or ServerSettings()
        self.store = store or ArtifactStore(self.data_dir)
        self.timeline = TimelineIndex.in_data_dir(self.store.data_dir)  # opened on first read
        self.queue = queue
        self.queue_watch = QueueWatch()  # its outages, logged once each
        self.bus = bus or EventBus()
        self.live = live or LiveHub()
        self.owns_backends = owns_backends
        self.sessions: dict[str, FlowSession] = {}
        self.cache = ArtifactCache(self.store, capacity=self.settings.open_files)
        self.transfers = TransferStats()
        self.answered: deque[Answered] = deque(maxlen=2000)
        # Registered by the app factory (the metrics): the state need not know who watches.
        self.session_watchers: list[SessionWatcher] = []
        # flow -> how its forwarding goes, for a flow this edge box forwards.
        self.forwarding: dict[str, Callable[[], ForwardStatus]] = {}
        self._state_store: StateStore | None = None
        self._state_lock = asyncio.Lock()

    @classmethod
    def for_serve(
        cls,
        data_dir: Path,
        *,
        settings: ServerSettings | None = None,
        queue_url: str | None = None,
        gc_settings: GcSettings | None = None,
        sqlite_sync: SqliteSync = "NORMAL",
    ) -> AppState:
        """State for ``mediaflow serve``: opens the data dir's store and queue
        (``sqlite_sync``: the SQLite queue's ``synchronous``).

        Raises :class:`~mediaflow.queue.QueueError` if the queue setting is unusable.
        """
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        queue = open_queue(queue_url, data_dir, sqlite_sync=sqlite_sync)
        return cls(
            data_dir,
            settings=settings,
            queue=queue,
            owns_backends=True,
            gc_settings=gc_settings,
        )

    @classmethod
    def for_session(
        cls,
        session: FlowSession,
        *,
        settings: ServerSettings | None = None,
        gc_settings: GcSettings | None = None,
    ) -> AppState:
        """State for serving next to a *started* session (its bus, queue and runner).

        Raises ``RuntimeError`` if the session has not started.
        """
        if not session.started:
            raise RuntimeError("start the FlowSession before serving it")
        state = cls(
            session.data_dir,
            settings=settings,
            queue=session.queue,
            bus=session.bus,
            live=session.live,
            gc_settings=gc_settings,
        )
        state.add_session(session)
        return state

    def add_session(self, session: FlowSession) -> None:
        """Show a running flow live (latest values and backlog from its runner), and
        tell every :attr:`session_watchers` callback about it."""
        self.sessions[session.spec.name] = session
        for watch in self.session_watchers:
            watch(session)

    async def state_store(self) -> StateStore:
        """The state store (run records), opened on first use."""
        async with self._state_lock:
            if self._state_store is None:
                self._state_store = await asyncio.to_thread(StateStore, self.data_dir)
            return self._state_store

    async def close(self) -> None:
        """Close files, the state store and (when owned) the queue. Idempotent."""
        self.cache.close()
        if self._state_store is not None:
            store, self._state_store = self._state_store, None
            await asyncio.to_thread(store.close)
        if self.owns_backends and self.queue is not None:
            queue, self.queue = self.queue, None
            await queue.close()
        await asyncio.to_thread(self.timeline.close)
        await asyncio.to_thread(self.store.close)


STATE: web.AppKey[AppState] = web.AppKey("mediaflow_state", AppState)
