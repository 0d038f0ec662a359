"""Content-addressed artifact store.

Bytes become files named by their sha256 under ``<data>/artifacts/``, written
to a temp file, fsynced and linked into place so a reader sees all of an
artifact or nothing; the same bytes are stored once however many processes
save them. Size, first media type and creation time live in SQLite
(``<data>/store.sqlite3``), next to the ``run_artifact`` keeps GC honours.

- ``artifacts``: :class:`ArtifactStore`, the public face; ``info``: what it takes
  and tells (:class:`ArtifactInfo`, the sources it saves, keep kinds, digest checks).
- ``files``: temp files that hash while they fill, and atomic placement.
- ``streams``: an async iterator's chunks handed to a writer thread, bounded.
- ``metadata``: the SQLite tables, shared by processes (WAL, busy timeout).
- ``current``: the contextvar behind :func:`save_artifact`.
- ``remote``: :class:`RemoteArtifactStore`, for several machines: an artifact
  service (``mediaflow serve``) holds the bytes, the data directory caches them;
  ``service`` is its blocking HTTP client.
- ``opener``: :func:`open_store`, the local store or the service that
  ``MEDIAFLOW_STORE`` names.
- ``errors``: :class:`ArtifactNotFound`, :class:`StoreFull`, and the service's
  :class:`RemoteStoreError`, :class:`StoreUnreachable`.
"""

from mediaflow.store.artifacts import ArtifactStore
from mediaflow.store.current import current_store, save_artifact, use_store
from mediaflow.store.errors import (
    ArtifactNotFound,
    RemoteStoreError,
    StoreFull,
    StoreUnreachable,
)
from mediaflow.store.info import ArtifactInfo
from mediaflow.store.opener import open_store
from mediaflow.store.remote import RemoteArtifactStore

__all__ = [
    "ArtifactInfo",
    "ArtifactNotFound",
    "ArtifactStore",
    "RemoteArtifactStore",
    "RemoteStoreError",
    "StoreFull",
    "StoreUnreachable",
    "current_store",
    "open_store",
    "save_artifact",
    "use_store",
]
