"""A source's saves ride out an artifact store that is away: the thin shell of :mod:`.away`.

:meth:`StoreOutages.save` saves as the store does. When the store is away
(:func:`~.away.away_from` says ``"store"``), it waits and tries again
(:func:`~.away.pause_s`) until the save lands, however long that takes. The
source then carries on with the same ``seq``: nothing is failed, retried,
dead-lettered or ended. Every other error is raised as before: a full store
(:class:`~mediaflow.store.StoreFull`), a refusal, bad data.

The wait does not end when the run stops. A source still waiting then is
cancelled after the sources' grace period, like a source held back by a full
outbox while the queue is away (:meth:`~.journal.Journal.flush_when_available`).
What it was saving is then not emitted.

Each node's outage is told once: ``store_unavailable`` and a warning when its
first try fails, ``store_available`` and an info line, with how long it was
away, when a save lands again. Neither names a secret: the service's URL
without any ``user:password@``, and never the token, which travels in a header.

Bytes and paths can be saved again as they are. An async iterator of chunks
cannot be replayed, so when the store can be away (an artifact service) it is
first written to a temp file in the store's temp dir (:func:`~mediaflow.store.streams.spooled`),
and every try saves that file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterable, Callable, Mapping
from pathlib import Path
from typing import Any

from mediaflow.engine.away import Outage, away_from, on_failed, on_landed, pause_s
from mediaflow.engine.away import without_userinfo as public
from mediaflow.engine.events import EventBus
from mediaflow.media import MediaRef
from mediaflow.store import ArtifactStore, RemoteArtifactStore
from mediaflow.store.info import Source
from mediaflow.store.streams import spooled

log = logging.getLogger("mediaflow.engine")


class StoreOutages:
    """The saves of one flow run's sources, riding out the store's outages. Runs on
    the event loop. ``clock``: monotonic seconds (tests pass their own)."""

    def __init__(
        self,
        flow: str,
        store: ArtifactStore,
        bus: EventBus,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._flow = flow
        self._store = store
        self._bus = bus
        self._clock = clock
        self._outages: dict[str, Outage] = {}
        base = store.base_url if isinstance(store, RemoteArtifactStore) else None
        self._where = public(base) if base is not None else str(store.data_dir)

    async def save(
        self, node: str, data: Source, media_type: str, meta: Mapping[str, Any] | None
    ) -> MediaRef:
        """Save as :meth:`ArtifactStore.save` does, waiting for as long as the store
        is away. May be cancelled: the save is then abandoned. Raises every error
        of the save other than the store being away."""
        if isinstance(data, AsyncIterable) and isinstance(self._store, RemoteArtifactStore):
            async with spooled(data, self._store.tmp_dir) as path:
                return await self._save_until_landed(node, path, media_type, meta, spool=path)
        return await self._save_until_landed(node, data, media_type, meta)

    async def _save_until_landed(
        self,
        node: str,
        data: Source,
        media_type: str,
        meta: Mapping[str, Any] | None,
        *,
        spool: Path | None = None,
    ) -> MediaRef:
        failures = 0
        while True:
            tried_at = self._clock()
            try:
                ref = await self._store.save(data, media_type, meta)
            except Exception as exc:
                if away_from(exc) != "store":
                    raise
                failures += 1
                self._failed(node, exc, tried_at)
                await asyncio.sleep(pause_s(failures))
                if spool is not None:
                    # A part untouched for an hour looks abandoned to the sweep.
                    await asyncio.to_thread(os.utime, spool)
                continue
            if node in self._outages:
                self._landed(node)
            return ref

    def _failed(self, node: str, exc: Exception, tried_at: float) -> None:
        outage, began = on_failed(self._outages.get(node, Outage()), tried_at, self._clock())
        self._outages[node] = outage
        if began:
            error = public(f"{type(exc).__name__}: {exc}")
            log.warning(
                "artifact store %s is away: source %r waits and saves again when it answers (%s)",
                self._where,
                node,
                error,
            )
            self._bus.publish(
                "store_unavailable",
                {"flow": self._flow, "node": node, "store": self._where, "error": error},
            )

    def _landed(self, node: str) -> None:
        outage, away_s = on_landed(self._outages[node], self._clock())
        self._outages[node] = outage
        if away_s is not None:
            log.info(
                "artifact store %s answers again: source %r saved after %.1f s",
                self._where,
                node,
                away_s,
            )
            self._bus.publish(
                "store_available",
                {
                    "flow": self._flow,
                    "node": node,
                    "store": self._where,
                    "away_s": round(away_s, 3),
                },
            )
