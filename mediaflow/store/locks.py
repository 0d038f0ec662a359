"""File locks that let a sweep delete artifacts while other processes save and serve them.

``flock`` locks belong to an open file description, so they work between
processes and between separately opened descriptors of one process, and the
kernel drops them when a process dies: a crashed saver or sweeper never leaves
a lock behind.

- :class:`SaveLock`: savers share it around "record the row, then place or find
  the file"; a sweep takes it exclusively while it deletes a batch. So a save
  either finishes before the batch (its fresh ``saved_at`` keeps it out of the
  sweep, whose cutoff is older than the sweep itself) or starts after it (and
  finds the file gone and writes it again): it always ends with the artifact
  present.
- :func:`try_share` / :func:`try_delete_lock`: the HTTP server shares a lock on
  an artifact's descriptor while a response sends it; a sweep that cannot lock
  the file exclusively leaves it for the next sweep.

Where ``fcntl`` is missing (Windows) the locks are no-ops: one process per data
directory is then the rule.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class SaveLock:
    """Shared by this process's savers (counted across threads), exclusive for a sweep.

    Blocking: :meth:`shared` waits while a sweep holds :meth:`exclusive`, and the
    other way round. Both are meant for worker threads.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self._fd = -1
        self._sharers = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._mutex:
            if self._sharers == 0:
                if self._fd < 0:
                    self._fd = _open(self.path)
                _flock(self._fd, "LOCK_SH")
            self._sharers += 1
        try:
            yield
        finally:
            with self._mutex:
                self._sharers -= 1
                if self._sharers == 0:
                    _flock(self._fd, "LOCK_UN")

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        # Its own descriptor: a lock on this process's shared one would only convert it.
        fd = _open(self.path)
        try:
            _flock(fd, "LOCK_EX")
            yield
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._mutex:
            if self._fd >= 0 and self._sharers == 0:
                os.close(self._fd)
                self._fd = -1


class Busy(Exception):
    """Another holder has the lock."""


@contextmanager
def exclusive_or_busy(path: Path) -> Iterator[None]:
    """Hold ``path`` exclusively for the block, or raise :class:`Busy` at once."""
    fd = _open(path)
    try:
        if not _try_flock(fd, "LOCK_EX"):
            raise Busy(str(path))
        yield
    finally:
        os.close(fd)


def try_share(fd: int) -> bool:
    """Share-lock an open artifact (a response is sending it); False if a sweep holds it.

    Non-blocking, so fine on the event loop. A failure changes nothing for the
    reader: the descriptor stays readable even if the file is then unlinked.
    """
    return _try_flock(fd, "LOCK_SH")


def unshare(fd: int) -> None:
    """Drop :func:`try_share`'s lock. Non-blocking."""
    _flock(fd, "LOCK_UN")


def try_delete_lock(fd: int) -> bool:
    """Exclusively lock an artifact about to be deleted; False while anyone shares it."""
    return _try_flock(fd, "LOCK_EX")


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def _flock(fd: int, operation: str) -> None:
    if fcntl is not None:
        fcntl.flock(fd, getattr(fcntl, operation))


def _try_flock(fd: int, operation: str) -> bool:
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, getattr(fcntl, operation) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
