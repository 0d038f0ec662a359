"""Open artifacts kept between requests, so a hot read costs no thread hop.

An artifact never changes once it has an address: its size, its first media
type and its bytes are fixed. So the first request for a digest stats it
(the store's SQLite row) and opens it in a worker thread, and later requests
reuse the open file. The cache is an LRU bounded by ``capacity`` open files;
an entry in use by a transfer is closed only after the transfer releases it.

Deletion is the one change an artifact sees (GC). An entry older than
``revalidate_s`` is checked with a plain ``os.stat`` of its path (a metadata
lookup, cheaper than the hop it saves); a vanished file is evicted and the
request answered 404. Within that window a deleted artifact may still be
served from the open file: the bytes are the right ones, they are just gone
from the directory.

While a transfer uses an entry (``refs`` above 0) the entry holds a shared
``flock`` on its descriptor (:func:`mediaflow.store.locks.try_share`): a sweep in
any process locks a file exclusively before deleting it, so it skips artifacts
being sent, and a cap never pulls a clip from under a viewer who is seeking in
it. Taken on 0 -> 1 and dropped on 1 -> 0, never per request; the call does not
block. When it fails (a sweep holds the file that instant) the transfer goes on
from the open descriptor regardless.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import BinaryIO

from mediaflow.server import mediatypes
from mediaflow.server.header_block import HeaderBlock
from mediaflow.server.ranges import Facts
from mediaflow.store import ArtifactStore
from mediaflow.store.locks import try_share, unshare


@dataclass(eq=False)
class OpenArtifact:
    """One open artifact. ``file`` stays valid while ``refs`` > 0 or it is cached."""

    digest: str
    media_type: str  # as recorded at save
    served_type: str  # the Content-Type sent when the request names none
    path: Path
    file: BinaryIO
    facts: Facts
    etag: str  # the header value, quoted
    last_modified: str  # the header value, an IMF-fixdate
    checked_at: float
    refs: int = 0
    evicted: bool = False
    fixed_headers: HeaderBlock | None = None  # built once, by the handler
    fd: int = field(init=False)
    shared: bool = False  # holds the flock that keeps sweeps off it while sending

    def __post_init__(self) -> None:
        self.fd = self.file.fileno()

    @property
    def size(self) -> int:
        return self.facts.size

    def use(self) -> None:
        """One more transfer uses it; the first one locks it against sweeps."""
        self.refs += 1
        if self.refs == 1 and not self.shared and not self.file.closed:
            try:
                self.shared = try_share(self.fd)
            except OSError:
                self.shared = False  # still readable; a sweep may just not see the use

    def unuse(self) -> None:
        """A transfer is done with it; the last one unlocks it."""
        self.refs -= 1
        if self.refs == 0 and self.shared:
            self.shared = False
            if not self.file.closed:
                # A failure leaves nothing behind: closing the descriptor drops the lock.
                with contextlib.suppress(OSError):
                    unshare(self.fd)

    def close_if_unused(self) -> None:
        if self.evicted and self.refs == 0 and not self.file.closed:
            self.file.close()


class ArtifactCache:
    """LRU of :class:`OpenArtifact` by digest. Use from one event loop only."""

    def __init__(
        self, store: ArtifactStore, *, capacity: int = 256, revalidate_s: float = 1.0
    ) -> None:
        if capacity < 1:
            raise ValueError("the cache needs room for at least one open file")
        self.store = store
        self.capacity = capacity
        self.revalidate_s = revalidate_s
        self._entries: OrderedDict[str, OpenArtifact] = OrderedDict()
        self._loading: dict[str, asyncio.Future[OpenArtifact | None]] = {}
        self.hits = 0
        self.misses = 0

    async def acquire(self, digest: str) -> OpenArtifact | None:
        """The open artifact for a well-formed ``digest``, or None if it is not stored.

        The caller must :meth:`release` what it got. A hit costs no await
        beyond this coroutine; a miss stats and opens in a worker thread
        (concurrent misses for one digest share that hop). Raises ``OSError``
        for I/O errors other than a missing file.
        """
        entry = self.acquire_hit(digest)
        if entry is not None:
            return entry
        self.misses += 1
        for _ in range(3):
            pending = self._loading.get(digest)
            if pending is None:
                pending = asyncio.ensure_future(self._load(digest))
                self._loading[digest] = pending
                pending.add_done_callback(self._forget_load(digest, pending))
            loaded = await asyncio.shield(pending)
            if loaded is None:
                return None
            if not loaded.evicted:
                loaded.use()
                return loaded
            # Evicted (and closed) by other loads between its load and this wake-up.
        private = await asyncio.to_thread(self._open, digest)
        if private is not None:
            private.evicted = True  # not cached: closed on release
            private.use()
        return private

    def acquire_hit(self, digest: str) -> OpenArtifact | None:
        """:meth:`acquire` when ``digest`` is open already (no await at all); else None."""
        entry = self._entries.get(digest)
        if entry is None:
            return None
        now = time.monotonic()
        if now - entry.checked_at < self.revalidate_s or self._still_there(entry, now):
            self._entries.move_to_end(digest)
            self.hits += 1
            entry.use()
            return entry
        return None

    def _forget_load(
        self, digest: str, pending: asyncio.Future[OpenArtifact | None]
    ) -> Callable[[asyncio.Future[OpenArtifact | None]], None]:
        def forget(_: asyncio.Future[OpenArtifact | None]) -> None:
            if self._loading.get(digest) is pending:
                del self._loading[digest]

        return forget

    def release(self, entry: OpenArtifact) -> None:
        entry.unuse()
        entry.close_if_unused()

    def _still_there(self, entry: OpenArtifact, now: float) -> bool:
        try:
            os.stat(entry.path)
        except FileNotFoundError:
            self._evict(entry.digest)
            return False
        entry.checked_at = now
        return True

    async def _load(self, digest: str) -> OpenArtifact | None:
        opened = await asyncio.to_thread(self._open, digest)
        if opened is None:
            return None
        old = self._entries.pop(digest, None)
        if old is not None:
            old.evicted = True
            old.close_if_unused()
        self._entries[digest] = opened
        while len(self._entries) > self.capacity:
            self._evict(next(iter(self._entries)))
        return opened

    def _open(self, digest: str) -> OpenArtifact | None:
        """Stat and open in a worker thread; None if the artifact is absent."""
        info = self.store.stat(digest)
        if info is None:
            return None
        try:
            handle = open(info.path, "rb")  # noqa: SIM115 - owned by the cache entry
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(handle.fileno()).st_size  # the bytes we will send are the truth
        except BaseException:
            handle.close()
            raise
        facts = Facts(digest, size, int(info.created_at))
        return OpenArtifact(
            digest=digest,
            media_type=info.media_type,
            served_type=mediatypes.served_type(info.media_type),
            path=info.path,
            file=handle,
            facts=facts,
            etag=f'"{digest}"',
            last_modified=formatdate(facts.last_modified, usegmt=True),
            checked_at=time.monotonic(),
        )

    def _evict(self, digest: str) -> None:
        entry = self._entries.pop(digest, None)
        if entry is not None:
            entry.evicted = True
            entry.close_if_unused()

    def close(self) -> None:
        """Close every idle file; files in use close when released. Idempotent."""
        for digest in list(self._entries):
            self._evict(digest)
