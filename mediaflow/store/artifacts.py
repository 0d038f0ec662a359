"""The content-addressed artifact store: bytes in, a :class:`MediaRef` out.

Layout under the data directory::

    artifacts/<hex[0:2]>/<hex[2:4]>/<hex>   one read-only file per digest
    artifacts/tmp/part-*.tmp                 saves in progress (same filesystem)
    store.lock                               savers share it, a sweep takes it alone
    store.sqlite3                            size, media type, created/saved times, keeps

The file is the truth for "is it there": it appears whole, by a link, after
its bytes are fsynced. The SQLite row comes second, and both happen under the
shared save lock (see :mod:`mediaflow.store.locks`), so a sweep never deletes
between them. A crash between the two leaves a file without a row, which the
next save of the same bytes records, or a sweep adopts (and then judges like
any other); a save whose row cannot be written (the disk filled up between the
two) takes its file back before raising :class:`StoreFull`. Every save of the
same bytes refreshes the row's ``saved_at``, which starts the artifact's grace
period again.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import time
from collections.abc import AsyncIterable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from mediaflow.media import MediaRef, check_media_type
from mediaflow.store.errors import ArtifactNotFound, StoreFull, raise_if_full
from mediaflow.store.files import PartFile, place, read_chunks, sweep_parts
from mediaflow.store.info import (
    KEEP_KINDS,
    ArtifactInfo,
    KeepKind,
    Source,
    SyncSource,
    copy_meta,
    digest_of,
)
from mediaflow.store.locks import SaveLock
from mediaflow.store.metadata import GcCounters, Metadata, Row, StoreTotals, SweepWork
from mediaflow.store.recent import RecentBytes
from mediaflow.store.streams import Chunk, check_chunk, fill_part


class ArtifactStore:
    """Content-addressed files plus SQLite metadata under one data directory.

    Safe for many threads and many processes on the same directory. Nothing
    touches the disk until first use; the first save also removes temp files
    that a crashed writer left more than an hour ago. Methods without
    ``async`` block on the filesystem: call them from a worker thread when
    on an event loop (``exists``/``path_for`` are cheap enough either way).
    """

    def __init__(self, data_dir: Path | str, *, clock: Callable[[], float] = time.time) -> None:
        """``clock`` gives the epoch seconds recorded as save and keep times (tests
        pass a fake one to step through grace periods)."""
        self.data_dir = Path(data_dir)
        self.artifacts_dir = self.data_dir / "artifacts"
        self.tmp_dir = self.artifacts_dir / "tmp"
        self.db_path = self.data_dir / "store.sqlite3"
        self.clock = clock
        self._meta = Metadata(self.db_path)
        self.save_lock = SaveLock(self.data_dir / "store.lock")
        self._prepared = False
        # Small artifacts this store saved lately, for the read that usually follows.
        self._recent = RecentBytes()

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self.data_dir)!r})"

    # -- saving -----------------------------------------------------------------------------

    async def save(
        self, data: Source, media_type: str, meta: Mapping[str, Any] | None = None
    ) -> MediaRef:
        """Store ``data`` and return its reference, with ``meta`` attached to the reference.

        ``data`` is a bytes-like object, a path (``str`` or ``os.PathLike``,
        streamed in 1 MiB chunks), an async iterable of bytes-like chunks, or
        a sync iterable of them (iterated in a worker thread). File I/O never
        runs on the event loop; an async iterable is consumed in constant
        memory (at most two 1 MiB batches in flight; the iterator waits while
        the writer is a batch behind). Cancelling removes the partial file.

        The returned reference carries *this* call's media type; the store's
        row keeps the first media type ever seen for the digest.
        Raises :class:`MediaError` (bad media type), ``TypeError`` (bad data),
        :class:`StoreFull` (disk or quota full), ``OSError`` (other I/O).
        """
        if isinstance(data, bytes):
            # One hop for the whole save; the bytes are kept for a read that follows
            # (see :mod:`mediaflow.store.recent`). Immutable, so kept without a copy.
            ref = await asyncio.to_thread(self.save_sync, data, media_type, meta)
            self._recent.put(ref.digest, data)
            return ref
        if not isinstance(data, AsyncIterable):
            # One hop for the whole save: a buffer is already in memory, and a path or
            # a sync iterable is streamed chunk by chunk inside that thread.
            return await asyncio.to_thread(self.save_sync, data, media_type, meta)
        media_type = check_media_type(media_type)
        meta = copy_meta(meta)
        part = await asyncio.to_thread(self._new_part)
        try:
            await fill_part(part, data)
        except BaseException as exc:
            # The thread finishes the discard even if this await is cancelled again.
            await asyncio.to_thread(part.discard)
            raise_if_full(exc, self.artifacts_dir)
            raise
        digest, size = await asyncio.to_thread(self._finish, part, media_type)
        return MediaRef(digest, media_type, size, meta)

    def save_sync(
        self, data: SyncSource, media_type: str, meta: Mapping[str, Any] | None = None
    ) -> MediaRef:
        """Blocking :meth:`save` for worker threads (codec, device). Same contract and errors."""
        media_type = check_media_type(media_type)
        meta = copy_meta(meta)
        if isinstance(data, bytes | bytearray | memoryview):
            digest, size = self._save_buffer(memoryview(data).cast("B"), media_type)
        elif isinstance(data, str | os.PathLike):
            with open(data, "rb") as source:
                digest, size = self._save_chunks(read_chunks(source), media_type)
        elif isinstance(data, AsyncIterable):
            raise TypeError("save_sync cannot consume an async iterable; use `await save(...)`")
        elif isinstance(data, Iterable):
            digest, size = self._save_chunks(data, media_type)
        else:
            raise TypeError(
                f"cannot save {type(data).__name__}: expected bytes, a path or chunks of bytes"
            )
        return MediaRef(digest, media_type, size, meta)

    def _save_buffer(self, view: memoryview, media_type: str) -> tuple[str, int]:
        digest = "sha256:" + hashlib.sha256(view).hexdigest()
        # Repeats are common (silence, a still scene): skip the write and the fsync.
        self._prepare()
        with self.save_lock.shared():
            if self.local_path(digest).is_file():
                self._record(digest, len(view), media_type)
                return digest, len(view)
        return self._save_chunks((view,), media_type)

    def _save_chunks(self, chunks: Iterable[Chunk], media_type: str) -> tuple[str, int]:
        part = self._new_part()
        with self._owning(part):
            for chunk in chunks:
                part.write(check_chunk(chunk))
        return self._finish(part, media_type)

    def _finish(self, part: PartFile, media_type: str) -> tuple[str, int]:
        """Fsync, place and record a filled part. Blocking; the part is gone afterwards."""
        with self._owning(part):
            digest = part.finish()
            # Both steps inside the shared lock: a sweep deletes between saves,
            # never between placing (or finding) the file and refreshing its row.
            with self.save_lock.shared():
                final = self.local_path(digest)
                stored = place(part, final)
                try:
                    self._record(digest, part.size, media_type)
                except StoreFull:
                    if stored:
                        self._unplace(digest, final)
                    raise
        return digest, part.size

    def _unplace(self, digest: str, final: Path) -> None:
        """Take back a file this save placed but could not record (the metadata could
        not grow): a save that raised :class:`StoreFull` leaves nothing visible.

        Caller holds the shared save lock. A file that another save of the same bytes
        recorded meanwhile stays; so does one whose row cannot even be read.
        """
        try:
            recorded = self._meta.get(digest) is not None
        except (OSError, sqlite3.Error):
            return  # a file without a row is a state the store already recovers from
        if not recorded:
            final.unlink(missing_ok=True)

    def _record(self, digest: str, size: int, media_type: str) -> None:
        now = self.clock()
        self._meta.record(Row(digest, size, media_type, now, now))

    def _new_part(self) -> PartFile:
        self._prepare()
        try:
            return PartFile(self.tmp_dir)
        except OSError as exc:
            raise_if_full(exc, self.artifacts_dir)
            raise

    def _prepare(self) -> None:
        # Idempotent and race-free without a lock: mkdir tolerates others, sweeping twice is
        # harmless.
        if not self._prepared:
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
            self.save_lock.path.touch(exist_ok=True)
            sweep_parts(self.tmp_dir)
            self._prepared = True

    @contextmanager
    def _owning(self, part: PartFile) -> Iterator[None]:
        """On any failure inside, remove the part; a full disk becomes :class:`StoreFull`."""
        try:
            yield
        except BaseException as exc:
            part.discard()
            raise_if_full(exc, self.artifacts_dir)
            raise

    def sweep_temp(self, older_than_s: float = 3600.0) -> int:
        """Remove temp files untouched for ``older_than_s``; return how many. Blocking."""
        return sweep_parts(self.tmp_dir, older_than_s=older_than_s)

    # -- reading ----------------------------------------------------------------------------

    def path_for(self, digest: str) -> Path:
        """Where ``digest``'s bytes live (whether or not they do). Raises :class:`MediaError`.

        A store whose directory is a cache (:class:`~mediaflow.store.remote.RemoteArtifactStore`)
        fetches the bytes here first; :meth:`local_path` never does.
        """
        return self.local_path(digest)

    def local_path(self, digest: str) -> Path:
        """Where ``digest``'s bytes live in this directory (whether or not they do).

        Pure: no I/O. Raises :class:`MediaError` for a malformed digest.
        """
        hex_digits = digest_of(digest)[len("sha256:") :]
        return self.artifacts_dir / hex_digits[0:2] / hex_digits[2:4] / hex_digits

    def exists(self, ref: MediaRef | str) -> bool:
        """True once the whole artifact is readable. Raises :class:`MediaError` if malformed."""
        return self.local_path(digest_of(ref)).is_file()

    async def read(self, ref: MediaRef | str) -> bytes:
        """All of an artifact's bytes, read in a worker thread (use :meth:`open` for large ones).

        A small artifact this store saved lately is answered from memory once its file
        is found in place (a ``stat``, no thread hop; :mod:`mediaflow.store.recent`).
        Raises :class:`ArtifactNotFound` or :class:`MediaError`.
        """
        digest = digest_of(ref)
        recent = self._recent.get(digest)
        if recent is not None:
            if self.local_path(digest).is_file():
                return recent
            self._recent.discard(digest)  # deleted since (a sweep): missing, as below
        try:
            return await asyncio.to_thread(self.local_path(digest).read_bytes)
        except FileNotFoundError:
            raise ArtifactNotFound(digest) from None

    def open(self, ref: MediaRef | str) -> BinaryIO:
        """Open an artifact for streaming reads. Blocking; the caller closes the file.

        Raises :class:`ArtifactNotFound` or :class:`MediaError`.
        """
        digest = digest_of(ref)
        try:
            return open(self.local_path(digest), "rb")
        except FileNotFoundError:
            raise ArtifactNotFound(digest) from None

    def stat(self, ref: MediaRef | str) -> ArtifactInfo | None:
        """The artifact's facts, or None if its file is absent. Blocking.

        A file without a row (a crash between placing and recording it) is
        reported as ``application/octet-stream`` created at the file's mtime.
        """
        digest = digest_of(ref)
        path = self.local_path(digest)
        try:
            file_stat = path.stat()
        except FileNotFoundError:
            return None
        row = self._meta.get(digest)
        if row is None:
            return ArtifactInfo(
                digest, file_stat.st_size, "application/octet-stream", file_stat.st_mtime, path
            )
        return ArtifactInfo(digest, row.size, row.media_type, row.created_at, path, row.saved_at)

    # -- housekeeping (GC) ------------------------------------------------------------------

    def iter_infos(self, *, batch: int = 500) -> Iterator[ArtifactInfo]:
        """Every recorded artifact, oldest first. Blocking, lazily paged, safe to delete while
        iterating. A row may outlive its file after a crash inside :meth:`delete`; GC
        deletes it again."""
        for row in self._meta.rows_by_age(batch=batch):
            path = self.local_path(row.digest)
            yield ArtifactInfo(
                row.digest, row.size, row.media_type, row.created_at, path, row.saved_at
            )

    def delete(self, digest: str) -> bool:
        """Remove the file, then the row; True if either existed. Blocking.

        Does not look at keeps: the caller (GC) decides what may go.
        """
        path = self.local_path(digest)
        self._recent.discard(digest)
        try:
            path.unlink()
            removed_file = True
        except FileNotFoundError:
            removed_file = False
        removed_row = self._meta.remove(digest)
        return removed_file or removed_row

    def keep(
        self,
        run_id: str,
        digest: str,
        *,
        expires_at: float | None = None,
        kind: KeepKind = "recording",
    ) -> bool:
        """Record that run ``run_id`` keeps ``digest``, so GC will not take it. Blocking.

        ``expires_at`` (epoch seconds) ends the keep; None keeps it until
        :meth:`release` or :meth:`unkeep`. ``kind`` ``"recording"`` may still be
        evicted under the disk cap, oldest first; ``"hold"`` (a node still uses
        the reference) never is. Keeping again replaces the expiry and kind.
        True if newly recorded, False if this run already kept it. Raises
        :class:`ArtifactNotFound` if the digest is not recorded, ``ValueError``
        for an empty run id or an unknown kind.
        """
        digest = digest_of(digest)
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
        if kind not in KEEP_KINDS:
            raise ValueError(f"kind must be one of {', '.join(KEEP_KINDS)}, got {kind!r}")
        added = self._meta.keep(run_id, digest, self.clock(), expires_at, kind)
        if added is None:
            raise ArtifactNotFound(digest)
        return added

    def unkeep(self, run_id: str, digest: str) -> bool:
        """Drop run ``run_id``'s keep of ``digest``; True if it had one. Blocking."""
        return self._meta.unkeep(run_id, digest_of(digest))

    def is_kept(self, digest: str) -> bool:
        """True if any unexpired keep holds ``digest``. Blocking."""
        return self._meta.is_kept(digest_of(digest), self.clock())

    def release(self, run_id: str) -> int:
        """Drop every keep of ``run_id``; return how many. Blocking."""
        return self._meta.release(run_id)

    def total_bytes(self) -> int:
        """Sum of recorded artifact sizes (a counter, not a scan). Blocking."""
        return self._meta.total_bytes()

    def totals(self) -> StoreTotals:
        """Bytes and count stored, and of those under an unexpired keep. Blocking."""
        return self._meta.totals(self.clock())

    def gc_counters(self) -> GcCounters:
        """What sweeps of this store did, over every process. Blocking."""
        return self._meta.gc_counters()

    def add_gc_counters(self, work: SweepWork) -> None:
        """Add one sweep's work to :meth:`gc_counters`. Blocking."""
        self._meta.add_gc_counters(work)

    def close(self) -> None:
        """Close the metadata connection. Idempotent; a later call reopens it."""
        self._meta.close()
        self.save_lock.close()

    def __enter__(self) -> ArtifactStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
