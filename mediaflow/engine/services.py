"""The services the nodes of one session share: ``ctx.more.shared(make)``.

A service is whatever several nodes should have one of (a pool of worker
processes, a loaded model). :class:`Services` makes each on the first request
for it, keyed by the ``make`` that builds it from the session's settings, and
closes them all when the session closes. The engine knows nothing of what they
are: a node module brings its own ``make``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from mediaflow.config import EngineSettings

log = logging.getLogger("mediaflow.engine")

T = TypeVar("T")


class Services:
    """One instance per ``make``; the session owns it (see the module doc)."""

    def __init__(self, settings: EngineSettings) -> None:
        self._settings = settings
        self._made: dict[object, Any] = {}
        self._lock = threading.Lock()
        self._closed = False

    def shared(self, make: Callable[[EngineSettings], T]) -> T:
        """The one ``make(settings)`` of this session, made by the first call with an
        equal ``make``. Thread-safe: ``make`` runs under a lock, once. Raises what
        ``make`` raised (nothing is kept then), and ``RuntimeError`` once closed."""
        return self.keyed(make, lambda: make(self._settings))

    def keyed(self, key: object, make: Callable[[], T]) -> T:
        """The one ``make()`` of this session for ``key`` (hashable): for a service
        made from something other than the settings (a file in the data directory).
        Thread-safe as :meth:`shared`."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the session's shared services are closed")
            if key not in self._made:
                self._made[key] = make()
            return cast(T, self._made[key])

    async def close(self) -> None:
        """Close every service, the last made first: its ``close()``, if it has one,
        in a thread. A failure is logged and the others still close. Idempotent."""
        with self._lock:
            self._closed = True
            made, self._made = list(self._made.values()), {}
        for service in reversed(made):
            close = getattr(service, "close", None)
            if not callable(close):
                continue
            try:
                await asyncio.to_thread(close)
            except Exception:
                log.exception("closing the shared %s failed", type(service).__name__)
