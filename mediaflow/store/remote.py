"""A store for several machines: an artifact service holds the bytes, the data dir caches them.

Selected by ``MEDIAFLOW_STORE=http://host:port`` (:func:`mediaflow.store.open_store`);
the service is ``mediaflow serve`` on the machine that keeps the artifacts.

Saving stores the bytes in the cache exactly as :class:`ArtifactStore` does (one
code path for hashing, atomic placement and :class:`StoreFull`), then uploads
the cached file with ``PUT {base}/artifacts/{digest}``. The reference is
returned only once the service answered 201: a consumer on another machine
may fetch it at once. A digest this store uploaded less than ``remember_s``
ago is not sent again (a still scene, silence). The memory is short on
purpose: a PUT of bytes the service has refreshes their save time there,
which restarts the service's GC grace period (``ARTIFACT_GC_GRACE_S``), and a
reference handed out must not outlive that.

Reading (:meth:`read`, :meth:`open`, :meth:`path_for`, :meth:`stat`) answers from
the cache, fetching a missing artifact with ``GET {base}/artifacts/{digest}``
into a temp file of the cache first; the bytes are hashed as they arrive,
checked against the digest and linked into place, so a reader sees a whole
artifact or none. :meth:`exists` asks the cache, then ``HEAD``.

The cache is an ordinary store directory, bounded like any data directory:
the periodic sweep of ``mediaflow run`` (``ARTIFACT_GC_INTERVAL_S``, grace
``ARTIFACT_GC_GRACE_S``), its cap (``ARTIFACT_MAX_BYTES``) and ``mediaflow gc
--data DIR``. Evicting from it is always safe: it holds only what the service
holds (a save whose upload fails removes its cached copy), and a later read
fetches it again. So every housekeeping method (:meth:`iter_infos`,
:meth:`delete`, :meth:`keep` and the other keeps, :meth:`totals`, the GC
counters, :meth:`sweep_temp`) works on the cache and nothing else: a keep
protects the cached copy from this machine's sweeps, not the service's copy
from the service's GC, which sees only the service's own queue and keeps.

Errors name the URL: :class:`StoreUnreachable` (no answer after the retries of
:class:`~mediaflow.store.service.RetryPolicy`), :class:`RemoteStoreError`
(401, 413 ...; ``status`` says which), :class:`StoreFull` (507, or the local
disk), :class:`ArtifactNotFound` (404).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from mediaflow.media import MediaError, MediaRef, check_media_type
from mediaflow.store.artifacts import ArtifactStore
from mediaflow.store.errors import ArtifactNotFound, RemoteStoreError
from mediaflow.store.files import place
from mediaflow.store.info import ArtifactInfo, KeepKind, Source, SyncSource, digest_of
from mediaflow.store.service import FALLBACK_TYPE, RetryPolicy, ServiceClient

REMEMBER_S = 60.0  # well under the default GC grace (3600 s) of the service
REMEMBER_MAX = 10_000  # digests remembered as uploaded, least recently uploaded forgotten first


class RemoteArtifactStore(ArtifactStore):
    """An :class:`ArtifactStore` whose directory ``cache_dir`` caches a service at ``base_url``.

    Accepted wherever an :class:`ArtifactStore` is. Thread-safe; blocking methods
    block on the network as well as the disk (see each). ``token`` is the
    service's ``MEDIAFLOW_TOKEN``; ``timeout_s`` bounds each socket operation;
    ``retry`` says how often a request that got no answer is tried again.
    """

    def __init__(
        self,
        base_url: str,
        *,
        cache_dir: Path | str,
        token: str | None = None,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        remember_s: float = REMEMBER_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Raises ``ValueError`` if ``base_url`` is not an http(s) URL. Connects to nothing yet."""
        super().__init__(cache_dir, clock=clock)
        self.client = ServiceClient(base_url, token, timeout_s=timeout_s, retry=retry)
        self.base_url = self.client.base_url
        self.remember_s = remember_s
        self._uploaded: OrderedDict[str, float] = OrderedDict()
        self._uploaded_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RemoteArtifactStore({self.base_url!r}, cache_dir={str(self.data_dir)!r})"

    # -- saving -----------------------------------------------------------------------------

    async def save(
        self, data: Source, media_type: str, meta: Mapping[str, Any] | None = None
    ) -> MediaRef:
        """:meth:`ArtifactStore.save`, then the upload (in a worker thread); returns once the
        service holds the bytes.

        Also raises :class:`RemoteStoreError`, :class:`StoreUnreachable`, and
        :class:`StoreFull` for a full service. Cancelling while the upload runs
        does not stop it; the reference is dropped.
        """
        if not isinstance(data, AsyncIterable):
            return await asyncio.to_thread(self.save_sync, data, media_type, meta)
        ref = await super().save(data, media_type, meta)
        await asyncio.to_thread(self._publish, ref)
        return ref

    def save_sync(
        self, data: SyncSource, media_type: str, meta: Mapping[str, Any] | None = None
    ) -> MediaRef:
        """Blocking :meth:`save` for worker threads (codec, device). Same contract and errors."""
        ref = super().save_sync(data, media_type, meta)
        self._publish(ref)
        return ref

    def _publish(self, ref: MediaRef) -> None:
        """Upload the cached file of ``ref`` unless it was uploaded lately. Blocking.

        On failure the cached copy goes too, so the cache never holds what the
        service lacks (a concurrent save of the same bytes may then have to
        fetch them again).
        """
        if self._uploaded_lately(ref.digest):
            return
        try:
            with open(self.local_path(ref.digest), "rb") as body:
                self.client.put(ref.digest, body, ref.size, ref.media_type)
        except BaseException:
            self.delete(ref.digest)
            raise
        with self._uploaded_lock:
            self._uploaded[ref.digest] = time.monotonic()
            self._uploaded.move_to_end(ref.digest)
            while len(self._uploaded) > REMEMBER_MAX:
                self._uploaded.popitem(last=False)

    def _uploaded_lately(self, digest: str) -> bool:
        with self._uploaded_lock:
            at = self._uploaded.get(digest)
        return at is not None and time.monotonic() - at < self.remember_s

    # -- reading ----------------------------------------------------------------------------

    def path_for(self, digest: str) -> Path:
        """The cached file of ``digest``, fetched from the service first if it is missing.

        Blocking: on a miss, for as long as the download takes (on an event loop,
        ``await store.read(...)`` or call this from a thread). Raises
        :class:`ArtifactNotFound` if the service does not have it either,
        :class:`MediaError`, and the errors of a download (module docstring).
        """
        return self._cached(digest_of(digest))

    def exists(self, ref: MediaRef | str) -> bool:
        """True if cached, else whether the service has it (``HEAD``). Blocking on a miss."""
        digest = digest_of(ref)
        return self.local_path(digest).is_file() or self.client.has(digest)

    async def read(self, ref: MediaRef | str) -> bytes:
        """All of an artifact's bytes, fetched into the cache first if missing, in a worker thread.

        Raises :class:`ArtifactNotFound`, :class:`MediaError`, and the errors of a download.
        """
        return await asyncio.to_thread(self._read_cached, digest_of(ref))

    def _read_cached(self, digest: str) -> bytes:
        try:
            return self._cached(digest).read_bytes()
        except FileNotFoundError:  # evicted from the cache between the two steps
            raise ArtifactNotFound(digest) from None

    def open(self, ref: MediaRef | str) -> BinaryIO:
        """Open the cached file for streaming reads, fetching it first if missing. Blocking."""
        digest = digest_of(ref)
        self._cached(digest)
        return super().open(digest)

    def stat(self, ref: MediaRef | str) -> ArtifactInfo | None:
        """The cached copy's facts (fetched first if missing), or None if the service lacks it."""
        digest = digest_of(ref)
        try:
            self._cached(digest)
        except ArtifactNotFound:
            return None
        return super().stat(digest)

    def keep(
        self,
        run_id: str,
        digest: str,
        *,
        expires_at: float | None = None,
        kind: KeepKind = "recording",
    ) -> bool:
        """:meth:`ArtifactStore.keep` in the cache. A digest the cache has no row for (saved on
        another machine) is fetched first, blocking on the network: a node that holds a
        reference is about to read it anyway. The service's copy is not affected."""
        try:
            return super().keep(run_id, digest, expires_at=expires_at, kind=kind)
        except ArtifactNotFound:
            self._download(digest_of(digest))
        return super().keep(run_id, digest, expires_at=expires_at, kind=kind)

    def _cached(self, digest: str) -> Path:
        path = self.local_path(digest)
        if not path.is_file():
            self._download(digest)
        return path

    def _download(self, digest: str) -> None:
        """GET ``digest`` into a temp file of the cache, check it, place it, record its row.

        Blocking. A failed or interrupted download leaves nothing in the cache.
        """
        url = self.client.url_for(digest)

        def receive(chunks: Iterator[memoryview], content_type: str | None) -> None:
            part = self._new_part()
            with self._owning(part):
                for chunk in chunks:
                    part.write(chunk)
                got = part.finish()
                if got != digest:
                    raise RemoteStoreError(
                        f"GET {url} sent bytes whose digest is {got}; nothing cached", url=url
                    )
                with self.save_lock.shared():
                    place(part, self.local_path(digest))
                    self._record(digest, part.size, _recorded_type(content_type))

        self.client.get(digest, receive)

    def close(self) -> None:
        """Close the cache's metadata and the idle connections. Idempotent; a later call reopens."""
        super().close()
        self.client.close()


def _recorded_type(content_type: str | None) -> str:
    """The media type a fetched artifact is recorded with in the cache."""
    try:
        return check_media_type(content_type)
    except MediaError:
        return FALLBACK_TYPE
