""":func:`open_store`: the store :class:`~mediaflow.config.StoreSettings` name for a
data directory (``MEDIAFLOW_STORE``, read at the process boundary)."""

from __future__ import annotations

from pathlib import Path

from mediaflow.config import StoreSettings
from mediaflow.store.artifacts import ArtifactStore
from mediaflow.store.remote import RemoteArtifactStore


def open_store(data_dir: Path | str, settings: StoreSettings | None = None) -> ArtifactStore:
    """The artifact store of ``data_dir``, as ``settings`` say (None: the local store).

    No ``settings.url`` (``MEDIAFLOW_STORE`` unset, empty or ``local``):
    ``ArtifactStore(data_dir)``. A service's URL: a :class:`RemoteArtifactStore`
    of that service, caching in ``data_dir``, with ``settings.token``
    (``MEDIAFLOW_TOKEN``). Touches neither disk nor network and reads no
    environment variable: :meth:`StoreSettings.from_env
    <mediaflow.config.StoreSettings.from_env>` does, and refuses a setting it
    cannot use.
    """
    settings = settings if settings is not None else StoreSettings()
    if settings.url is None:
        return ArtifactStore(data_dir)
    return RemoteArtifactStore(settings.url, cache_dir=data_dir, token=settings.token)
