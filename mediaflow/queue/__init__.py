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
    EmissionRun,
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
    "EmissionRun",
    "ItemKind",
    "NewItem",
    "QueueError",
    "QueueStats",
    "QueueUnavailable",
    "SqliteQueue",
    "StreamBacklog",
    "StreamKey",
    "UnsupportedQueue",
    "WorkItem",
    "WorkQueue",
    "open_queue",
    "queue_path",
]


SUPPORTED_QUEUES = "'sqlite' (the default), 'sqlite:///absolute/path' or 'sqlite://relative/path'"
"""What :func:`queue_path` understands, for messages."""


class UnsupportedQueue(QueueError, ValueError):
    """A queue setting names a backend or form this mediaflow does not have."""

    def __init__(self, setting: str, *, name: str = "MEDIAFLOW_QUEUE") -> None:
        super().__init__(
            f"{name}={setting!r} is not a queue this mediaflow supports: {_why(setting)}"
        )
        self.setting = setting


def _why(setting: str) -> str:
    if setting.startswith(("redis://", "rediss://", "unix://")):
        return f"there is no Redis backend yet; use {SUPPORTED_QUEUES}"
    return f"expected {SUPPORTED_QUEUES}"


def queue_path(url_or_none: str | None, data_dir: Path, *, name: str = "MEDIAFLOW_QUEUE") -> Path:
    """The SQLite file a queue setting names; pure apart from asking whether a
    named path is a directory.

    - ``None``, ``""``, ``"sqlite"`` or ``"sqlite://"``: ``data_dir / "queue.sqlite3"``;
    - ``"sqlite:///abs/path.sqlite3"``: that file (``sqlite://rel/path`` is relative
      to ``data_dir``; a directory gets ``queue.sqlite3`` inside).

    Raises :class:`UnsupportedQueue` (naming ``name`` and the value) for any other
    setting, ``redis://`` included until that backend exists.
    """
    setting = (url_or_none or "").strip()
    if setting in ("", "sqlite", "sqlite://"):
        return Path(data_dir) / DB_FILENAME
    if setting.startswith("sqlite://"):
        path = Path(data_dir) / Path(setting.removeprefix("sqlite://")).expanduser()
        return path / DB_FILENAME if path.is_dir() else path
    raise UnsupportedQueue(setting, name=name)


def open_queue(url_or_none: str | None, data_dir: Path) -> WorkQueue:
    """Open the queue a setting names (see :func:`queue_path`).

    Synchronous. Raises :class:`UnsupportedQueue` for a setting it does not
    understand and :class:`QueueUnavailable` if the queue cannot be opened.
    """
    return SqliteQueue(queue_path(url_or_none, data_dir))
