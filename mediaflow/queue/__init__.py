"""Work-queue contract and backends.

:mod:`~mediaflow.queue.contract` states what every backend does;
:class:`SqliteQueue` is the embedded default (one file in the data
directory), :class:`~mediaflow.queue.redis.queue.RedisQueue` the distributed one
(Redis Streams; the ``redis`` extra), and :func:`open_queue` picks the backend a
setting names (``--queue`` / ``MEDIAFLOW_QUEUE``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlencode

from mediaflow.queue.contract import (
    DeadLetter,
    DeadLetters,
    Delivery,
    EmissionRun,
    Gate,
    Inspection,
    ItemKind,
    LatestValues,
    Leases,
    LeaseTable,
    NewItem,
    QueueError,
    QueueStats,
    QueueUnavailable,
    Retention,
    StreamBacklog,
    StreamKey,
    WorkItem,
    WorkQueue,
)
from mediaflow.queue.sqlite import DB_FILENAME, SqliteQueue
from mediaflow.queue.sqlite.db import SyncMode

__all__ = [
    "DeadLetter",
    "DeadLetters",
    "Delivery",
    "EmissionRun",
    "Gate",
    "Inspection",
    "ItemKind",
    "LatestValues",
    "LeaseTable",
    "Leases",
    "NewItem",
    "QueueError",
    "QueueStats",
    "QueueTarget",
    "QueueUnavailable",
    "Retention",
    "SqliteQueue",
    "StreamBacklog",
    "StreamKey",
    "UnsupportedQueue",
    "WorkItem",
    "WorkQueue",
    "open_queue",
    "queue_target",
]


SUPPORTED_QUEUES = (
    "'sqlite' (the default), 'sqlite:///absolute/path', 'sqlite://relative/path', "
    "or 'redis://host:port/db' (also rediss:// and unix://; ?prefix=NAME namespaces the keys)"
)
"""What :func:`queue_target` understands, for messages."""

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class UnsupportedQueue(QueueError, ValueError):
    """A queue setting names a backend or form this mediaflow does not have."""

    def __init__(self, setting: str, *, name: str = "MEDIAFLOW_QUEUE", why: str = "") -> None:
        super().__init__(
            f"{name}={setting!r} is not a queue this mediaflow supports: "
            f"{why or f'expected {SUPPORTED_QUEUES}'}"
        )
        self.setting = setting


@dataclass(frozen=True)
class QueueTarget:
    """Where a queue setting points: an SQLite file, or a Redis URL and key prefix."""

    backend: Literal["sqlite", "redis"]
    path: Path | None = None
    url: str = ""
    prefix: str = "mediaflow"


def queue_target(
    url_or_none: str | None, data_dir: Path, *, name: str = "MEDIAFLOW_QUEUE"
) -> QueueTarget:
    """What a queue setting names; pure apart from asking whether a named path is
    a directory and whether redis-py is installed.

    - ``None``, ``""``, ``"sqlite"`` or ``"sqlite://"``: ``data_dir / "queue.sqlite3"``;
    - ``"sqlite:///abs/path.sqlite3"``: that file (``sqlite://rel/path`` is relative
      to ``data_dir``; a directory gets ``queue.sqlite3`` inside);
    - ``"redis://host:port/db"`` (``rediss://``, ``unix://``): a Redis server; an
      optional ``prefix`` query parameter namespaces the keys (default
      ``mediaflow``).

    Raises :class:`UnsupportedQueue` (naming ``name`` and the value) for any other
    setting, and for a Redis URL when the ``redis`` extra is not installed.
    """
    setting = (url_or_none or "").strip()
    if setting in ("", "sqlite", "sqlite://"):
        return QueueTarget("sqlite", path=Path(data_dir) / DB_FILENAME)
    if setting.startswith("sqlite://"):
        path = Path(data_dir) / Path(setting.removeprefix("sqlite://")).expanduser()
        return QueueTarget("sqlite", path=path / DB_FILENAME if path.is_dir() else path)
    if setting.startswith(REDIS_SCHEMES):
        if importlib.util.find_spec("redis") is None:
            why = "the Redis backend needs redis-py: pip install 'mediaflow[redis]'"
            raise UnsupportedQueue(setting, name=name, why=why)
        url, prefix = _split_prefix(setting)
        if not prefix:
            raise UnsupportedQueue(setting, name=name, why="the key prefix must not be empty")
        return QueueTarget("redis", url=url, prefix=prefix)
    raise UnsupportedQueue(setting, name=name)


def _split_prefix(url: str) -> tuple[str, str]:
    """The URL without its ``prefix`` query parameter, and that parameter."""
    base, _, query = url.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    prefixes = [value for key, value in pairs if key == "prefix"]
    if not prefixes:
        return url, "mediaflow"
    rest = urlencode([(key, value) for key, value in pairs if key != "prefix"])
    return (f"{base}?{rest}" if rest else base), prefixes[-1]


def open_queue(
    url_or_none: str | None, data_dir: Path, *, sqlite_sync: SyncMode = "NORMAL"
) -> WorkQueue:
    """Open the queue a setting names (see :func:`queue_target`).

    ``sqlite_sync`` is the SQLite queue's ``synchronous`` (NORMAL or FULL);
    a Redis queue ignores it. Synchronous; a Redis queue connects on first use. Raises
    :class:`UnsupportedQueue` for a setting it does not understand and
    :class:`QueueUnavailable` if an SQLite queue cannot be opened.
    """
    target = queue_target(url_or_none, data_dir)
    if target.backend == "redis":
        from mediaflow.queue.redis.queue import RedisQueue

        return RedisQueue(target.url, prefix=target.prefix)
    assert target.path is not None
    return SqliteQueue(target.path, synchronous=sqlite_sync)
