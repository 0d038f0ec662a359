"""Shared fixtures. Each section belongs to one part of mediaflow; append new
sections below the last one rather than editing another's."""

from __future__ import annotations

import asyncio
import importlib
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from mediaflow import eventloop
from mediaflow.queue import SqliteQueue, WorkQueue

# A skip fails the run in CI (tests/ci_skips.py); pytester runs the plugin's own tests;
# tests/redis_server.py runs a real redis-server (fixtures ``redis_server``, ``fresh_redis``,
# ``durable_redis_server``); tests/rtsp_server.py runs GStreamer's RTSP server as a camera
# (fixture ``rtsp_server``).
pytest_plugins = [
    "tests.ci_skips",
    "pytester",
    "tests.redis_server",
    "tests.rtsp_server",
    "tests.mqtt_broker",
]

# -- work queue backends -------------------------------------------------------
#
# ``queue`` is an opened backend in a fresh place; every test in
# tests/test_queue_contract_*.py (one role of the queue each) runs once per
# name in QUEUE_BACKENDS.
# ``queue_backend.open()`` opens one more handle on the same backend (a second
# consumer, or a reopen after close); the fixture closes whatever it opened.

# "redis" joins once mediaflow/queue/redis/queue.py exists (issue 12): its opener is
# ready below (_redis_queue_opener), so enabling it is adding the name here.
QUEUE_BACKENDS = ["sqlite", "redis"]


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
    if name == "redis":
        return _redis_queue_opener()
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


# -- the Redis queue backend -----------------------------------------------------
#
# Handles from one opener (one test, or one Hypothesis example) share a key prefix
# no other opener uses, on the session's redis-server (tests/redis_server.py), which
# is started on first use, started again if an earlier test stopped it, and emptied
# (FLUSHALL) for each opener. Without redis-server the test is skipped (a failure
# in CI).


def _redis_queue_opener() -> Callable[[], WorkQueue]:
    from tests.redis_server import session_redis_server

    # Imported by name: the backend is being written (issue 12) and mypy must not
    # need it meanwhile. RedisQueue(url, *, prefix) needs no event loop until used.
    queue_class = importlib.import_module("mediaflow.queue.redis.queue").RedisQueue
    server = session_redis_server()
    server.flush()
    prefix = f"mftest-{uuid.uuid4().hex[:12]}"

    def open_redis_queue() -> WorkQueue:
        handle = queue_class(server.url, prefix=prefix)
        if not isinstance(handle, WorkQueue):  # name the gap before a test trips on it
            missing = sorted(m for m in vars(WorkQueue) if m[0] != "_" and not hasattr(handle, m))
            raise TypeError(f"RedisQueue does not implement WorkQueue: missing {missing}")
        return handle

    return open_redis_queue
