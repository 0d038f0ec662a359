"""The bytes of small artifacts this process saved lately, for a read that follows.

A pipeline's typical read is of a chunk saved a few milliseconds earlier in the
same process (a microphone's 100 ms WAV, read by the speech node next). Reading
it back costs a hop to a worker thread and back, which on a busy event loop is
most of the cost: measured with 16 microphone → speech flows (issue 25), ~0.3
ms of CPU per 3 KB chunk, against ~2 µs for a dictionary lookup. Artifacts are
immutable (named by their digest), so the bytes saved are the bytes a read would
return; the store still checks the file is there before it answers from here, so
a deleted artifact is reported as missing exactly as before.

Bounded: artifacts up to :data:`MAX_ITEM_BYTES`, :data:`MAX_BYTES` in all, the
oldest dropped first. Thread-safe; every method is O(1) and never blocks on I/O.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

MAX_ITEM_BYTES: Final = 64 * 1024
"""Larger artifacts are not kept: a 100 ms chunk of 48 kHz stereo is 19 KB; a
720p JPEG (~100 KB) is read rarely and is not worth the memory."""

MAX_BYTES: Final = 4 * 1024 * 1024
"""~1300 chunks of 100 ms at 16 kHz mono: 8 s of 16 streams, far more than the
milliseconds between a save and the read that follows it."""


class RecentBytes:
    """A bounded, least-recently-saved-first map of digest to bytes."""

    def __init__(self, max_bytes: int = MAX_BYTES, max_item_bytes: int = MAX_ITEM_BYTES) -> None:
        self.max_bytes = max_bytes
        self.max_item_bytes = max_item_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """Bytes held now."""
        return self._size

    def __len__(self) -> int:
        return len(self._items)

    def put(self, digest: str, data: bytes) -> None:
        """Keep ``data`` (the whole artifact ``digest``) if it is small enough."""
        if len(data) > self.max_item_bytes:
            return
        with self._lock:
            old = self._items.pop(digest, None)
            if old is not None:
                self._size -= len(old)
            self._items[digest] = data
            self._size += len(data)
            while self._size > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self._size -= len(dropped)

    def get(self, digest: str) -> bytes | None:
        """The bytes of ``digest`` if held, else None."""
        with self._lock:
            return self._items.get(digest)

    def discard(self, digest: str) -> None:
        """Forget ``digest`` (it was deleted)."""
        with self._lock:
            old = self._items.pop(digest, None)
            if old is not None:
                self._size -= len(old)
