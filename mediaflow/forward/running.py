"""Starting and stopping an edge box's forwarder beside its session."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

from mediaflow.config import ConfigError
from mediaflow.engine.session import FlowSession
from mediaflow.flows import FlowSpec
from mediaflow.forward.forwarder import Forwarder
from mediaflow.forward.settings import ForwardSettings
from mediaflow.queue import open_queue
from mediaflow.queue.contract import QueueError, StreamKey, WorkQueue
from mediaflow.queue.sqlite import SqliteQueue
from mediaflow.store import RemoteStoreError, open_store
from mediaflow.store.service import RetryPolicy, ServiceClient

EDGE_ID_FILE = "edge-id"
LAST_WORD_S = 2.0
"""How long a stopping forwarder tries to send the ports' newest values."""
PROBE_TIMEOUT_S = 2.0
"""How long a probe of the service waits for an answer (one try)."""


def forwarded_streams(spec: FlowSpec) -> list[StreamKey]:
    """The streams an edge box forwards: every node's but the sources' and those
    marked ``edge`` (which run on the box)."""
    return [StreamKey(spec.name, n.id) for n in spec.nodes.values() if not (n.is_source or n.edge)]


def edge_id(data_dir: Path) -> str:
    """This box's name among those forwarding one flow: made once, kept in the data
    directory (its journal's ``seq`` numbers are the data directory's too)."""
    path = data_dir / EDGE_ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    made = uuid.uuid4().hex[:12]
    data_dir.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    temp.write_text(made + "\n")
    temp.replace(path)
    return path.read_text().strip()


class Forwarding:
    """A running forwarder and what it opened. :meth:`stop` ends it."""

    def __init__(
        self, forwarder: Forwarder, shared: WorkQueue, clients: tuple[ServiceClient, ...]
    ) -> None:
        self.forwarder = forwarder
        self._shared = shared
        self._clients = clients
        self._task = asyncio.create_task(forwarder.run(), name="mediaflow-forward")

    async def stop(self) -> None:
        """Stop forwarding where it is: what is left stays in the journal for the
        next start, which carries on from the shared queue's cursors."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        # Where the box got to, if the link answers: the shared side shows the present.
        with contextlib.suppress(QueueError, RemoteStoreError, OSError, TimeoutError):
            await asyncio.wait_for(self.forwarder.forward_latest(now=True), LAST_WORD_S)
        await self._shared.close()
        for client in self._clients:
            await asyncio.to_thread(client.close)


def start_forwarding(session: FlowSession, settings: ForwardSettings) -> Forwarding:
    """Forward ``session``'s other nodes' work (a started session of an edge box).
    Raises :class:`ConfigError` unless the session journals in SQLite."""
    data_dir = session.data_dir
    local = session.queue
    if not isinstance(local, SqliteQueue):
        raise ConfigError(
            f"a box that forwards journals locally, in SQLite; its queue is {local!r}"
        )
    assert settings.store.url is not None  # ForwardSettings holds a service
    shared = open_queue(settings.queue_url, data_dir)
    uploads = ServiceClient(settings.store.url, settings.store.token)
    probe = ServiceClient(
        settings.store.url,
        settings.store.token,
        timeout_s=PROBE_TIMEOUT_S,
        retry=RetryPolicy(attempts=1),
    )
    forwarder = Forwarder(
        session.spec.name,
        lambda: forwarded_streams(session.spec),
        edge=edge_id(data_dir),
        local=local,
        store=open_store(data_dir),
        shared=shared,
        uploads=uploads,
        bus=session.bus,
        probe=probe,
        arrivals=session.emissions_landed,
        max_bps=settings.max_bps,
        lease_ms=session.settings.lease_ms,
    )
    return Forwarding(forwarder, shared, (uploads, probe))
