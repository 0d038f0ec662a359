"""How many bytes of artifacts the waiting items of some streams reference: an edge
box's forward backlog in bytes (:mod:`mediaflow.forward`).

Read on a read-only connection of its own, in the caller's thread: it scans the
streams' items (a few ms per 10,000), which must not hold the queue's own
connection, or the event loop, that long, with a small page cache
(:data:`~mediaflow.queue.sqlite.schema.SCAN_CACHE`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from mediaflow.queue.items import StreamKey
from mediaflow.queue.sqlite.schema import SCAN_CACHE, span

STREAM_ID: Final = "SELECT id FROM streams WHERE flow = ? AND node = ?"
# A value that is a reference is stored as {"$ref": {..., "size": N}}.
REFERENCED_BYTES: Final = (
    "SELECT COALESCE(SUM(json_extract(payload, '$.value.\"$ref\".size')), 0)"
    " FROM items WHERE id BETWEEN ? AND ?"
)


def waiting_bytes(path: Path, streams: Iterable[StreamKey], timeout_s: float) -> int:
    """Bytes of the artifacts that the unacked items of ``streams`` reference (an
    artifact two items reference counts twice). Blocking; raises ``sqlite3.Error``."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout_s)
    try:
        conn.execute(SCAN_CACHE)
        total = 0
        for stream in streams:
            row = conn.execute(STREAM_ID, (stream.flow, stream.node)).fetchone()
            if row is not None:
                total += int(conn.execute(REFERENCED_BYTES, span(row[0])).fetchone()[0])
        return total
    finally:
        conn.close()
