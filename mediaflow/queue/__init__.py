"""Work-queue contract and backends.

:mod:`~mediaflow.queue.contract` states what every backend does;
:class:`SqliteQueue` is the embedded default (one file in the data
directory), and :func:`open_queue` picks the backend a setting names
(``--queue`` / ``MEDIAFLOW_QUEUE``).
"""

from __future__ import annotations

from pathlib import Path

from mediaflow.queue.contract import (
    DeadLetter,
    ItemKind,
    NewItem,
    QueueError,
    QueueStats,
    QueueUnavailable,
    StreamBacklog,
    StreamKey,
    WorkItem,
    WorkQueue,
)
from mediaflow.queue.sqlite import DB_FILENAME, SqliteQueue

__all__ = [
    "DeadLetter",
    "ItemKind",
    "NewItem",
    "QueueError",
    "QueueStats",
    "QueueUnavailable",
    "SqliteQueue",
    "StreamBacklog",
    "StreamKey",
    "WorkItem",
    "WorkQueue",
    "open_queue",
]


def open_queue(url_or_none: str | None, data_dir: Path) -> WorkQueue:
    """Open the queue a setting names.

    - ``None``, ``""``, ``"sqlite"`` or ``"sqlite://"``: SQLite in
      ``data_dir / "queue.sqlite3"``;
    - ``"sqlite:///abs/path.sqlite3"``: that file (``sqlite://rel/path``
      is relative to ``data_dir``; a directory gets ``queue.sqlite3`` inside);
    - ``"redis://host:port/db"``: not available yet.

    Synchronous. Raises :class:`QueueError` for a setting it does not
    understand and :class:`QueueUnavailable` if the queue cannot be opened.
    """
    setting = (url_or_none or "").strip()
    if setting in ("", "sqlite", "sqlite://"):
        return SqliteQueue(Path(data_dir) / DB_FILENAME)
    if setting.startswith("sqlite://"):
        path = Path(data_dir) / Path(setting.removeprefix("sqlite://")).expanduser()
        return SqliteQueue(path / DB_FILENAME if path.is_dir() else path)
    if setting.startswith(("redis://", "rediss://", "unix://")):
        raise QueueError("redis backend not installed yet")
    raise QueueError(f"unknown queue {setting!r}: expected 'sqlite', 'sqlite:///path' or redis://")
