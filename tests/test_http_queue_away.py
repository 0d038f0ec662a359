"""The server while its work queue (a real Redis) is away: every view still answers,
and the log says so once an outage, not once a request (mediaflow.server.queue_watch)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from mediaflow.server import AppState, ServerSettings
from tests.http_support import serve
from tests.redis_server import RedisServer

POLLS = ("/api/flows", "/metrics", "/api/flows", "/metrics", "/api/flows")


async def test_a_queue_that_is_away_is_logged_once_and_its_return_once(
    tmp_path: Path, durable_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    state = AppState.for_serve(
        tmp_path / "data", settings=ServerSettings(), queue_url=durable_redis_server.url
    )
    async with serve(tmp_path / "data", state=state) as served:
        with caplog.at_level(logging.DEBUG, logger="mediaflow.http"):
            for path in POLLS:
                async with served.client.get(served.url + path) as resp:
                    assert resp.status == 200
            assert state.queue_watch.up
            await asyncio.to_thread(durable_redis_server.stop)
            for path in POLLS:
                async with served.client.get(served.url + path) as resp:
                    assert resp.status == 200, path  # the views go on without the queue
            assert not state.queue_watch.up
            await asyncio.to_thread(durable_redis_server.start)
            async with served.client.get(served.url + "/api/flows") as resp:
                assert resp.status == 200
            assert state.queue_watch.up
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "work queue" in r.getMessage()]
    levels = [level for level, _ in said]
    assert levels[0] == logging.WARNING and levels[-1] == logging.INFO
    assert levels.count(logging.WARNING) == 1 and levels.count(logging.INFO) == 1
    assert levels.count(logging.DEBUG) >= len(POLLS) - 1
    assert f"{len(said) - 1} call(s) met it away" in said[-1][1]
