""":func:`open_store`: the store ``MEDIAFLOW_STORE`` names for a data directory."""

from __future__ import annotations

from pathlib import Path

from mediaflow.config import StoreSettings
from mediaflow.store.artifacts import ArtifactStore
from mediaflow.store.remote import RemoteArtifactStore


def open_store(data_dir: Path | str, settings: StoreSettings | None = None) -> ArtifactStore:
    """The artifact store of ``data_dir``, as ``settings`` (default: the environment) say.

    ``MEDIAFLOW_STORE`` unset, empty or ``local``: ``ArtifactStore(data_dir)``.
    An ``http://`` or ``https://`` URL: a :class:`RemoteArtifactStore` of that
    service, caching in ``data_dir``, with ``MEDIAFLOW_TOKEN`` as its token.
    Touches neither disk nor network. Raises
    :class:`~mediaflow.config.ConfigError` (a ``ValueError``) naming
    ``MEDIAFLOW_STORE`` for any other value.
    """
    settings = settings if settings is not None else StoreSettings.from_env()
    if settings.url is None:
        return ArtifactStore(data_dir)
    return RemoteArtifactStore(settings.url, cache_dir=data_dir, token=settings.token)
