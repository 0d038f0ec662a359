"""Which store ``save_artifact`` uses when it is not given one.

The engine sets the store for everything it runs with ``use_store(store)``;
asyncio tasks and ``asyncio.to_thread`` inherit it (they copy the context),
plain ``threading.Thread`` workers do not and should be handed the store.
Outside any ``use_store``, the store of :func:`default_data_dir` is used (the
local one, or the service ``MEDIAFLOW_STORE`` names: :func:`open_store`), one
instance per directory per process. That fallback reads the environment when it
is first needed: a ``save_artifact`` outside any flow (a script) has no process
boundary that could have handed it a store.

Inside a node's run the engine also sets the run's context (:func:`saving_through`),
so that :func:`save_artifact` there is ``ctx.save_artifact``: garbage
collection spares what it saved until the run emits, keeps or drops it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol

from mediaflow.config import StoreSettings, default_data_dir
from mediaflow.media import MediaRef
from mediaflow.store.artifacts import ArtifactStore
from mediaflow.store.info import Source
from mediaflow.store.opener import open_store


class RunSaver(Protocol):
    """What a node's run saves through (the engine's run context)."""

    async def save_artifact(
        self, data: Source, media_type: str, meta: Mapping[str, Any] | None = None
    ) -> MediaRef: ...


_current: ContextVar[ArtifactStore | None] = ContextVar("mediaflow_store", default=None)
_run: ContextVar[RunSlot | None] = ContextVar("mediaflow_run", default=None)
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
            store = _defaults[data_dir] = open_store(data_dir, StoreSettings.from_env())
        return store


@contextmanager
def use_store(store: ArtifactStore) -> Iterator[ArtifactStore]:
    """Make ``store`` the current store inside the ``with`` block (and tasks started there)."""
    token = _current.set(store)
    try:
        yield store
    finally:
        _current.reset(token)


class RunSlot:
    """Which run :func:`save_artifact` saves through in the task that entered the
    slot (and the tasks it starts): the engine enters one per batch of items a
    node runs and points ``run`` at each item's run in turn. An attribute store
    per item, where a context variable's set and reset would cost two calls."""

    __slots__ = ("run",)

    def __init__(self, run: RunSaver | None = None) -> None:
        self.run = run


@contextmanager
def saving_through(run: RunSaver | None = None) -> Iterator[RunSlot]:
    """Make the returned slot's run (``run`` at first) the one :func:`save_artifact`
    saves through inside the ``with`` block, in this task and tasks started there;
    after it, none."""
    slot = RunSlot(run)
    token = _run.set(slot)
    try:
        yield slot
    finally:
        slot.run = None  # a task started in the block and still saving: no run now
        _run.reset(token)


async def save_artifact(
    data: Source,
    media_type: str,
    meta: Mapping[str, Any] | None = None,
    *,
    store: ArtifactStore | None = None,
) -> MediaRef:
    """Save into ``store``, else :func:`current_store`. See :meth:`ArtifactStore.save`.

    Inside a node's run (and without ``store``) this is the run's
    ``ctx.save_artifact``: garbage collection spares the artifact until the run
    emits the reference, keeps or holds it, or ends.
    """
    if store is None:
        slot = _run.get()
        if slot is not None and slot.run is not None:
            return await slot.run.save_artifact(data, media_type, meta)
    target = store if store is not None else current_store()
    return await target.save(data, media_type, meta)
