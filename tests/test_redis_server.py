"""The real redis-server the Redis queue backend is tested against (tests/redis_server.py):
it answers redis-py on loopback, empties on demand, keeps its data across a restart
when appendonly, and leaves no process behind."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import psutil
import pytest
import redis
import redis.asyncio

from tests import redis_server as rs
from tests.redis_server import RedisServer, RedisStartError, launch, running_redis


def gone(pid: int) -> bool:
    """Exited and reaped: no process, not even a zombie, has this id (ids are not
    reused this fast)."""
    return not psutil.pid_exists(pid)


def listening(port: int) -> bool:
    try:
        socket.create_connection((rs.HOST, port), timeout=1.0).close()
    except OSError:
        return False
    return True


def test_the_session_server_is_on_loopback_without_persistence(redis_server: RedisServer) -> None:
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"
    assert redis_server.running and redis_server.ping()
    client = redis.Redis.from_url(redis_server.url)
    try:
        config = client.config_get("*")
    finally:
        client.close()
    assert (config["bind"], config["save"], config["appendonly"]) == ("127.0.0.1", "", "no")
    assert config["dir"] == str(redis_server.directory)


def test_it_answers_redis_py(fresh_redis: RedisServer) -> None:
    client = redis.Redis.from_url(fresh_redis.url)
    try:
        assert client.ping() is True
        assert client.set("greeting", "hello") is True
        assert client.get("greeting") == b"hello"
    finally:
        client.close()


async def test_it_answers_redis_py_asyncio(fresh_redis: RedisServer) -> None:
    client = redis.asyncio.Redis.from_url(fresh_redis.url)
    try:
        assert await client.ping() is True
        await client.xadd("s", {"n": "1"}, id="1-0")
        assert await client.xrange("s") == [(b"1-0", {b"n": b"1"})]
    finally:
        await client.aclose()


def test_flush_empties_every_database(fresh_redis: RedisServer) -> None:
    for db in (0, 3):
        client = redis.Redis.from_url(fresh_redis.url_for(db))
        try:
            client.mset({"a": 1, "b": 2})
        finally:
            client.close()
    assert (fresh_redis.dbsize(0), fresh_redis.dbsize(3)) == (2, 2)

    fresh_redis.flush()

    assert (fresh_redis.dbsize(0), fresh_redis.dbsize(3)) == (0, 0)


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_appendonly_keeps_data_across_a_restart(
    durable_redis_server: RedisServer, how: str
) -> None:
    server = durable_redis_server
    before = server.pid
    client = redis.Redis.from_url(server.url)
    try:
        client.set("kept", "yes")
        client.xadd("s", {"n": "1"}, id="7-0")
        if how == "restart":
            server.restart()  # SIGTERM: a clean shutdown
        else:
            server.kill()  # SIGKILL: a crash; appendfsync always lost nothing acknowledged
            assert not listening(server.port)
            server.start()
        assert server.pid != before and before is not None and gone(before)
        # The same URL reaches it again; redis-py reconnects on its own.
        assert client.get("kept") == b"yes"
        assert client.xrange("s") == [(b"7-0", {b"n": b"1"})]
    finally:
        client.close()


def test_without_appendonly_a_restart_starts_empty(tmp_path: Path) -> None:
    with running_redis(tmp_path) as server:
        server.command("SET", "lost", "soon")
        server.restart()
        assert server.dbsize() == 0
        assert server.command("GET", "lost") is None


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    server = launch(tmp_path)
    pid = server.pid
    assert pid is not None and psutil.Process(pid).name() == "redis-server"

    server.stop()

    assert gone(pid) and not server.running and server.pid is None
    assert not listening(server.port) and not server.ping()
    server.stop()  # stopping a stopped server does nothing


def test_stop_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    with running_redis(tmp_path) as server:
        pid = server.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # a stopped process leaves SIGTERM pending

        server.stop(timeout_s=0.2)

        assert gone(pid)


def test_the_session_server_comes_back_after_a_test_stopped_it(
    redis_server: RedisServer,
) -> None:
    old = redis_server.pid
    redis_server.stop()
    assert old is not None and gone(old)

    assert rs.session_redis_server() is redis_server  # what fresh_redis does too
    assert redis_server.running and redis_server.ping() and redis_server.pid != old


def test_a_start_that_fails_says_why(tmp_path: Path) -> None:
    with running_redis(tmp_path / "one") as one:
        taken = RedisServer(one.binary, tmp_path / "two", port=one.port)
        with pytest.raises(RedisStartError, match="Address already in use"):
            taken.start()
        assert not taken.running
        with pytest.raises(RuntimeError, match="running already"):
            one.start()


def test_launch_tries_another_port_when_its_pick_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_redis(tmp_path / "one") as one:
        real_free_port = rs.free_port
        picks = [one.port, one.port]  # taken twice, then a real pick
        monkeypatch.setattr(rs, "free_port", lambda: picks.pop() if picks else real_free_port())
        with running_redis(tmp_path / "two") as two:
            assert not picks and two.port != one.port and two.ping()


def test_a_missing_binary_skips_with_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install redis-server"):
        rs.redis_binary()
