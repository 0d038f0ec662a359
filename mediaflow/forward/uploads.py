"""The forwarder's uploads: an artifact's bytes to the service, once while it remembers.

A digest the service took within :data:`~mediaflow.store.remote.REMEMBER_S` is not
sent again (many items reference one still frame or one silence); the memory of
what was sent is bounded by count and age (:func:`~.plan.uploads_to_forget`). The
backlog's uploads wait for the rate cap (``MEDIAFLOW_FORWARD_MAX_BPS``); the ports'
newest values do not.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from mediaflow.forward.plan import RateBudget, uploads_to_forget
from mediaflow.media import MediaRef
from mediaflow.store import ArtifactStore
from mediaflow.store.remote import REMEMBER_S
from mediaflow.store.service import ServiceClient


class Uploader:
    """Sends artifacts from the box's ``store`` through ``client`` (module doc)."""

    def __init__(
        self, store: ArtifactStore, client: ServiceClient, *, max_bps: int | None = None
    ) -> None:
        self._store = store
        self._client = client
        self._budget = RateBudget(max_bps) if max_bps else None
        # digest -> when the service last took it, least recently sent first
        self._uploaded: OrderedDict[str, float] = OrderedDict()

    async def send(self, ref: MediaRef, *, capped: bool) -> int | None:
        """Send ``ref``'s bytes unless the service took them lately. Returns the bytes
        sent (0 when remembered), None if the box no longer has them. Blocking parts
        run in a thread. Raises what the service raised."""
        now = time.monotonic()
        if now - self._uploaded.get(ref.digest, -REMEMBER_S) < REMEMBER_S:
            return 0
        info = await asyncio.to_thread(self._store.stat, ref)
        if info is None:
            return None
        if capped and self._budget is not None:
            await asyncio.sleep(self._budget.wait_for(info.size, time.monotonic()))

        def put() -> None:
            with info.path.open("rb") as body:
                self._client.put(ref.digest, body, info.size, info.media_type)

        await asyncio.to_thread(put)
        now = time.monotonic()
        self._uploaded[ref.digest] = now
        self._uploaded.move_to_end(ref.digest)
        for _ in range(uploads_to_forget(self._uploaded, now)):
            self._uploaded.popitem(last=False)
        return info.size
