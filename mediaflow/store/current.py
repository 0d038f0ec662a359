"""Which store ``save_artifact`` uses when it is not given one.

The engine sets the store for everything it runs with ``use_store(store)``;
asyncio tasks and ``asyncio.to_thread`` inherit it (they copy the context),
plain ``threading.Thread`` workers do not and should be handed the store.
Outside any ``use_store``, the store of :func:`default_data_dir` is used (the
local one, or the service ``MEDIAFLOW_STORE`` names: :func:`open_store`), one
instance per directory per process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from mediaflow.config import default_data_dir
from mediaflow.media import MediaRef
from mediaflow.store.artifacts import ArtifactStore, Source
from mediaflow.store.opener import open_store

_current: ContextVar[ArtifactStore | None] = ContextVar("mediaflow_store", default=None)
_defaults: dict[Path, ArtifactStore] = {}
_defaults_lock = threading.Lock()


def current_store() -> ArtifactStore:
    """The store set by the innermost :func:`use_store`, else the default data dir's.

    Raises :class:`~mediaflow.config.ConfigError` for a ``MEDIAFLOW_STORE`` it cannot use.
    """
    store = _current.get()
    if store is not None:
        return store
    data_dir = default_data_dir()
    with _defaults_lock:
        store = _defaults.get(data_dir)
        if store is None:
            store = _defaults[data_dir] = open_store(data_dir)
        return store


@contextmanager
def use_store(store: ArtifactStore) -> Iterator[ArtifactStore]:
    """Make ``store`` the current store inside the ``with`` block (and tasks started there)."""
    token = _current.set(store)
    try:
        yield store
    finally:
        _current.reset(token)


async def save_artifact(
    data: Source,
    media_type: str,
    meta: Mapping[str, Any] | None = None,
    *,
    store: ArtifactStore | None = None,
) -> MediaRef:
    """Save into ``store``, else :func:`current_store`. See :meth:`ArtifactStore.save`."""
    target = store if store is not None else current_store()
    return await target.save(data, media_type, meta)
