"""Processes that start together open the same fresh SQLite files together:
``mediaflow run`` and ``mediaflow worker`` on one data directory both open its
run records, queue and store metadata. Switching a fresh file to WAL mode can
answer SQLITE_BUSY at once, whatever the busy timeout (a CI run saw a worker
exit with "database is locked" at start); each opener retries it.

Threads stand in for the processes: each opens its own connection, and SQLite
locks two connections of one process against each other as it does two
processes (measured before the fix: about one open in forty failed here).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from mediaflow.engine.state_store import StateStore
from mediaflow.queue.sqlite.db import SqliteDb
from mediaflow.store.metadata import Metadata

OPENERS = 6
ROUNDS = 60


def open_state(directory: Path) -> None:
    StateStore(directory).close()


def open_queue(directory: Path) -> None:
    asyncio.run(SqliteDb(directory / "queue.sqlite3").close())


def open_metadata(directory: Path) -> None:
    metadata = Metadata(directory / "store.sqlite3")
    metadata.total_bytes()
    metadata.close()


@pytest.mark.parametrize("opener", [open_state, open_queue, open_metadata])
def test_a_fresh_file_opened_by_many_at_once_opens_for_all(
    tmp_path: Path, opener: Callable[[Path], None]
) -> None:
    failures: list[BaseException] = []
    for round_ in range(ROUNDS):
        directory = tmp_path / str(round_)
        directory.mkdir()
        start = threading.Barrier(OPENERS)

        def open_at_once(directory: Path = directory, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                opener(directory)
            except BaseException as exc:  # every failure is reported below
                failures.append(exc)

        threads = [threading.Thread(target=open_at_once) for _ in range(OPENERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
