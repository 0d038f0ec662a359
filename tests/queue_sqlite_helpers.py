"""What the SQLite queue tests (``tests/test_queue_sqlite_*.py``) share: two streams
and a queue in a fresh file.

Import the fixture by its function name, which differs from the fixture name so
that a test's ``queue`` argument does not shadow an import (it replaces, in the
importing module, the backend-parametrized ``queue`` of ``tests/conftest.py``)::

    from tests.queue_sqlite_helpers import queue_fixture  # noqa: F401 - the queue fixture
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mediaflow.queue import SqliteQueue, StreamKey

A = StreamKey("f", "a")
B = StreamKey("f", "b")


@pytest.fixture(name="queue")
async def queue_fixture(tmp_path: Path) -> AsyncIterator[SqliteQueue]:
    q = SqliteQueue(tmp_path / "queue.sqlite3")
    yield q
    await q.close()


async def let_checkpoint_finish(queue: SqliteQueue) -> None:
    """Wait for the background checkpoint's copy, if one runs, as a fast disk
    would have it done: how long fsyncs take must not decide a test about the
    checkpoints' logic (the RESTART after the copy is the queue's own doing)."""
    if (copying := queue._db._copying) is not None:
        await asyncio.wrap_future(copying)
