"""Shared fixtures. Each section belongs to one part of mediaflow; append new
sections below the last one rather than editing another's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from mediaflow import eventloop
from mediaflow.queue import SqliteQueue, WorkQueue

# A skip fails the run in CI (tests/ci_skips.py); pytester runs the plugin's own tests.
pytest_plugins = ["tests.ci_skips", "pytester"]

# -- work queue backends -------------------------------------------------------
#
# ``queue`` is an opened backend in a fresh place; every test in
# tests/test_queue_contract_*.py runs once per name in QUEUE_BACKENDS.
# ``queue_backend.open()`` opens one more handle on the same backend (a second
# consumer, or a reopen after close); the fixture closes whatever it opened.

QUEUE_BACKENDS = ["sqlite"]


class QueueBackend:
    """A backend under test: its name, and a way to open more handles on it."""

    def __init__(self, name: str, opener: Callable[[], WorkQueue]) -> None:
        self.name = name
        self._opener = opener
        self._opened: list[WorkQueue] = []

    def open(self) -> WorkQueue:
        handle = self._opener()
        self._opened.append(handle)
        return handle

    async def close_all(self) -> None:
        for handle in self._opened:
            await handle.close()


def _queue_opener(name: str, place: Path) -> Callable[[], WorkQueue]:
    if name == "sqlite":
        return lambda: SqliteQueue(place / "queue.sqlite3")
    raise ValueError(f"no queue backend called {name!r}")


@pytest.fixture(params=QUEUE_BACKENDS)
async def queue_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[QueueBackend]:
    backend = QueueBackend(request.param, _queue_opener(request.param, tmp_path))
    yield backend
    await backend.close_all()


@pytest.fixture
async def queue(queue_backend: QueueBackend) -> WorkQueue:
    return queue_backend.open()


# -- event loops -----------------------------------------------------------------
#
# The commands run on uvloop where it is installed (mediaflow/eventloop.py), tests
# on asyncio's loop. A module or test marked ``both_loops`` runs on each.


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.new_event_loop
    }
    if item.get_closest_marker("both_loops") is not None:
        factory = eventloop.loop_factory("auto")
        if factory is not None:
            factories["uvloop"] = factory
    return factories
