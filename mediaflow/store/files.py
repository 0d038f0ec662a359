"""The file half of the store: temp files that hash while they fill, and atomic placement.

A :class:`PartFile` lives in ``artifacts/tmp/`` (the same filesystem as the
fan-out directories, so placing it is a link, never a copy). Once complete it
is fsynced, closed and hard-linked to its content address; ``os.link`` fails
with ``EEXIST`` when another writer got there first, which makes "stored once
per digest" a property of the filesystem rather than of a lock. Every function
here blocks; the store calls them from worker threads when it is async.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

READ_CHUNK = 1 << 20  # 1 MiB: paths are streamed in chunks of this size
STALE_PART_S = 3600.0  # a temp file untouched this long belongs to a writer that crashed

# Filesystems without hard links (exFAT, some FUSE and SMB mounts) answer with these.
_NO_HARDLINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


def _write_all(fd: int, data: memoryview) -> None:
    """Write every byte of ``data`` to ``fd``; ``os.write`` may write less than asked."""
    while data:
        written = os.write(fd, data)
        data = data[written:]


class PartFile:
    """A temp file being filled with an artifact's bytes, hashed as they are written.

    Blocking. One writer at a time; the internal lock exists so that
    :meth:`discard`, called from another thread when an async save is
    cancelled, waits for an in-flight :meth:`write` instead of closing the
    descriptor under it (a closed fd number can be reused by an unrelated open).
    """

    def __init__(self, tmp_dir: Path) -> None:
        fd, name = tempfile.mkstemp(prefix="part-", suffix=".tmp", dir=tmp_dir)
        self.path = Path(name)
        self.size = 0
        self._fd = fd
        self._hash = hashlib.sha256()
        self._lock = threading.Lock()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data``. Raises ``OSError`` from the filesystem (``ENOSPC`` ...)."""
        view = memoryview(data).cast("B")
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"{self.path.name} was already closed or discarded")
            _write_all(self._fd, view)
            self._hash.update(view)
            self.size += len(view)

    def finish(self) -> str:
        """Flush to stable storage, close, and return ``sha256:<hex>`` of what was written."""
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"{self.path.name} was already closed or discarded")
            if hasattr(os, "fchmod"):  # absent on Windows
                # Read-only, like git objects: an artifact is immutable once it has an address.
                os.fchmod(self._fd, 0o444)
            os.fsync(self._fd)
            fd, self._fd = self._fd, -1
            os.close(fd)
            return "sha256:" + self._hash.hexdigest()

    def discard(self) -> None:
        """Close if open and remove the temp file. Idempotent; never raises for a missing file."""
        with self._lock:
            if self._fd >= 0:
                fd, self._fd = self._fd, -1
                os.close(fd)
            self.path.unlink(missing_ok=True)


def place(part: PartFile, final: Path) -> bool:
    """Move a finished part to ``final``; True if this call stored it, False if it was there.

    Blocking. The temp file is gone afterwards either way. Readers see the whole
    file or none: the name appears by ``link``/``replace``, both atomic.
    """
    ensure_dirs(final.parent, stop_at=final.parent.parent.parent)
    try:
        os.link(part.path, final)
        stored = True
    except FileExistsError:
        stored = False
    except OSError as exc:
        if exc.errno not in _NO_HARDLINKS:
            raise
        # No-clobber is lost here, but two writers of one digest hold identical bytes,
        # and replace is still atomic for readers.
        stored = not final.exists()
        if stored:
            os.replace(part.path, final)
    part.discard()
    if stored:
        fsync_dir(final.parent)
    return stored


def ensure_dirs(path: Path, *, stop_at: Path) -> None:
    """Create ``path`` and missing parents below ``stop_at``, fsyncing each new entry's parent.

    Blocking. Without the parent fsync a power cut can drop a new fan-out
    directory together with the artifact linked into it.
    """
    if path == stop_at or path.is_dir():
        return
    ensure_dirs(path.parent, stop_at=stop_at)
    try:
        path.mkdir()
    except FileExistsError:
        return  # another writer made it; it fsyncs the parent
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries durable. Blocking. A no-op on Windows (no directory fds)."""
    if os.name == "nt":
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sweep_parts(tmp_dir: Path, *, older_than_s: float = STALE_PART_S) -> int:
    """Remove temp files last modified more than ``older_than_s`` ago; return how many.

    Blocking. A live writer touches its file on every chunk, so only a writer
    that crashed (or stalled for longer than the threshold) loses its part.
    """
    cutoff = time.time() - older_than_s
    removed = 0
    try:
        entries = list(os.scandir(tmp_dir))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
        except FileNotFoundError:
            continue  # its writer finished or another process swept it first
    return removed


def read_chunks(source: io.BufferedIOBase, size: int = READ_CHUNK) -> Iterator[memoryview]:
    """Yield successive views of one reused buffer; each is valid until the next is taken."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    while True:
        count = source.readinto(view)
        if not count:
            return
        yield view[:count]
