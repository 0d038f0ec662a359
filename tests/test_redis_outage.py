"""Redis going away under a running flow: a real redis-server, the real engine.

Each engine test runs a paced source (2,000 values over about two seconds) into
a sink a bit slower than that, on a Redis queue with ``appendonly yes`` and
``appendfsync always``, and takes Redis away mid-stream: a clean shutdown, a
crash, a freeze, or a connection that drops after Redis ran a call and before
it answered. The run must finish with every value consumed once (a repeat only
as a marked redelivery), in order, the outage reported and retried with
backoff, and the source held back meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
from pathlib import Path

import pytest

from mediaflow.engine.journal import OUTBOX_LIMIT
from mediaflow.queue.contract import NewItem, QueueUnavailable, StreamKey
from mediaflow.queue.redis import lua as redis_lua
from mediaflow.queue.redis import once as redis_once
from mediaflow.queue.redis.once import run_once
from mediaflow.queue.redis.queue import RedisQueue
from tests.outage_helpers import (
    DEADLINE_S,
    OutageRun,
    RedisCalls,
    Steadiness,
    assert_left_in_redis,
    redis_calls_fixture,  # noqa: F401 - fixture
)
from tests.redis_server import RedisServer, free_port, launch

OUTAGE_S = 1.0
UNAVAILABLE_LINE = "work queue unavailable"
COUNT = 2000


def paced_run(url: str, tmp_path: Path) -> OutageRun:
    """2,000 values over about two seconds into a sink a bit slower than that."""
    return OutageRun.build(
        url, tmp_path / "data", count=COUNT, burst=20, period_s=0.02, delay_s=0.001
    )


def unavailable_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.ERROR and UNAVAILABLE_LINE in record.getMessage()
    ]


async def stop_and_start(server: RedisServer, *, crash: bool = False) -> None:
    """Stop Redis (SIGTERM, a clean SHUTDOWN; or SIGKILL), wait OUTAGE_S, start it."""
    await asyncio.to_thread(server.kill if crash else server.stop)
    await asyncio.sleep(OUTAGE_S)
    await asyncio.to_thread(server.start)


# -- Redis restarted, crashed, frozen mid-stream -------------------------------------


async def test_a_clean_redis_restart_mid_stream_loses_nothing(
    durable_redis_server: RedisServer, tmp_path: Path
) -> None:
    """SIGTERM is Redis's SHUTDOWN: it writes the append-only file and exits, and
    runs the calls of its last turn without answering them (in doubt: sent again
    under the same request id, so they run once). Back on the same port a second
    later it has every item, pending entry and counter; the engine reconnects and
    reloads its scripts by itself, and reports the outage."""
    server = durable_redis_server
    run = paced_run(server.url, tmp_path)

    await run.through_outage(300, lambda: stop_and_start(server))

    run.assert_every_value_consumed_in_order()
    assert not [r for r in run.sink.runs if r.acked_before], "an acked item ran again"
    assert_left_in_redis(server, appended=COUNT, waiting=0)
    types = [event.type for event in run.events]
    assert types[0] == "queue_unavailable" and types[-1] == "queue_available", types
    assert f"redis://127.0.0.1:{server.port}/0 unreachable" in run.events[0].data["error"]


async def test_a_redis_crash_loses_nothing_acked_or_committed(
    durable_redis_server: RedisServer, tmp_path: Path
) -> None:
    """SIGKILL with ``appendfsync always``: Redis answered nothing it had not
    written to disk, so every commit the engine saw return (emissions and acks)
    survives the crash; what was in flight is sent again once it is back."""
    server = durable_redis_server
    run = paced_run(server.url, tmp_path)
    confirmed_before_crash: list[int] = []
    acked_before_crash: set[str] = set()

    async def crash() -> None:
        confirmed_before_crash.extend(run.queue.committed)
        acked_before_crash.update(run.queue.acked)
        await stop_and_start(server, crash=True)

    await run.through_outage(300, crash)

    run.assert_every_value_consumed_in_order()
    assert confirmed_before_crash and acked_before_crash
    # No acked item came back: no ack the queue confirmed was lost in the crash.
    assert not [r for r in run.sink.runs if r.acked_before], "an acked item ran again"
    assert set(confirmed_before_crash) <= {r.seq for r in run.sink.runs}
    assert_left_in_redis(server, appended=COUNT, waiting=0)


async def test_a_redis_that_hangs_times_out_and_nothing_runs_twice(
    durable_redis_server: RedisServer, tmp_path: Path
) -> None:
    """A frozen Redis (SIGSTOP; a network partition looks the same) accepts
    commands and answers none: calls time out (``?socket_timeout=`` in the URL)
    after they were sent, and Redis runs them when it thaws. Each still runs once."""
    server = durable_redis_server
    run = paced_run(f"{server.url}?socket_timeout=0.25", tmp_path)

    async def freeze() -> None:
        pid = server.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(OUTAGE_S)
        finally:
            os.kill(pid, signal.SIGCONT)

    await run.through_outage(300, freeze)

    run.assert_every_value_consumed_in_order()
    assert_left_in_redis(server, appended=COUNT, waiting=0)
    assert f"Timeout reading from 127.0.0.1:{server.port}" in run.events[0].data["error"]


@pytest.mark.parametrize("script", ["ENQUEUE", "CLAIM"])
async def test_a_call_redis_ran_but_never_answered_runs_once(
    script: str, durable_redis_server: RedisServer, tmp_path: Path, redis_calls: RedisCalls
) -> None:
    """The connection drops after Redis ran a commit (ENQUEUE) or a claim and
    before its answer arrived. Sent again as a new call, a commit would append
    its emissions twice and a claim would leave what it took waiting out a lease;
    sent again under its request id, Redis answers what it did the first time."""
    server = durable_redis_server
    run = paced_run(server.url, tmp_path)

    async def lose_an_answer() -> None:
        redis_calls.lose_answer_of(script)
        await run.until(lambda: bool(redis_calls.lost), f"a {script} answer to lose")

    await run.through_outage(300, lose_an_answer)

    run.assert_every_value_consumed_in_order()
    assert [r for r in run.sink.runs if r.redelivery] == []
    assert_left_in_redis(server, appended=COUNT, waiting=0)


# -- backoff, clear errors, backpressure -------------------------------------------


async def test_an_outage_is_retried_with_backoff_and_named_clearly(
    durable_redis_server: RedisServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    redis_calls: RedisCalls,
) -> None:
    """While Redis is down every loop retries with a doubling backoff, not in a
    tight loop: two seconds down cost a few dozen connection attempts, not
    thousands. The error names the server (host:port) and the operation."""
    caplog.set_level(logging.ERROR, logger="mediaflow.engine")
    server = durable_redis_server
    run = paced_run(server.url, tmp_path)
    attempts: list[int] = []

    async def outage() -> None:
        await asyncio.to_thread(server.stop)
        before = redis_calls.unreachable
        await asyncio.sleep(2.0)
        attempts.append(redis_calls.unreachable - before)
        await asyncio.to_thread(server.start)

    await run.through_outage(300, outage)

    run.assert_every_value_consumed_in_order()
    # About a dozen here; a loop polling every 50 ms alone would make 40.
    assert 1 <= attempts[0] <= 60, f"{attempts[0]} attempts to reach Redis in 2 s"
    lines = unavailable_lines(caplog)
    assert lines, "no error logged"
    assert f"redis://127.0.0.1:{server.port}/0 unreachable during" in lines[0]
    assert "script" in lines[0] or "connecting to" in lines[0]


async def test_an_outage_is_reported_once(
    durable_redis_server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One outage, one ``queue_unavailable`` event and one error line, then one
    ``queue_available`` once Redis answers again, however many retries it took."""
    caplog.set_level(logging.ERROR, logger="mediaflow.engine")
    server = durable_redis_server
    run = paced_run(server.url, tmp_path)

    await run.through_outage(300, lambda: stop_and_start(server))

    run.assert_every_value_consumed_in_order()
    assert [event.type for event in run.events] == ["queue_unavailable", "queue_available"]
    assert len(unavailable_lines(caplog)) == 1


async def test_a_source_emitting_through_an_outage_is_held_back_not_dropped(
    durable_redis_server: RedisServer, tmp_path: Path
) -> None:
    """A fast source keeps emitting while Redis is down: once the journal's outbox
    is full, ``emit`` waits, so memory holds at most the outbox and the one commit
    in flight; the source is neither failed nor restarted, and once Redis is back
    every value arrives, once, in order."""
    server = durable_redis_server
    count = 3000
    run = OutageRun.build(
        server.url, tmp_path / "data", count=count, burst=100, period_s=0.005, delay_s=0.0
    )
    held: list[tuple[int, int]] = []  # (emitted, committed) while held back
    steady = Steadiness(0.5)

    async def outage() -> None:
        await asyncio.to_thread(server.stop)
        await run.until(lambda: steady(run.source.emitted), "the source to be held back")
        held.append((len(run.source.emitted), len(run.queue.committed)))
        await asyncio.to_thread(server.start)

    await run.through_outage(100, outage)

    run.assert_every_value_consumed_in_order()
    emitted, committed = held[0]
    assert emitted < count, "the source was never held back"
    assert emitted - committed <= 2 * OUTBOX_LIMIT
    source_events = [e for e in run.bus.recent(0) if e.type in ("source_started", "cascade_retry")]
    assert len(source_events) == 1, source_events  # started once, never failed
    assert_left_in_redis(server, appended=count, waiting=0)


async def test_waiting_until_idle_rides_out_an_outage(
    durable_redis_server: RedisServer, tmp_path: Path
) -> None:
    server = durable_redis_server
    run = OutageRun.build(
        server.url, tmp_path / "data", count=50, burst=50, period_s=0.0, delay_s=0.0
    )
    await run.session.start()
    try:
        await asyncio.wait_for(run.session.wait(until_idle=True), DEADLINE_S)
        await asyncio.to_thread(server.stop)
        try:
            waiter = asyncio.create_task(run.session.wait(until_idle=True))
            await asyncio.sleep(OUTAGE_S)
        finally:
            await asyncio.to_thread(server.start)
        assert await asyncio.wait_for(waiter, DEADLINE_S) == "idle"
    finally:
        await run.session.stop()


# -- the queue itself --------------------------------------------------------------


async def test_the_queue_reconnects_and_reloads_its_scripts_after_a_restart(
    durable_redis_server: RedisServer,
) -> None:
    server = durable_redis_server
    queue = RedisQueue(server.url, prefix="restart")
    stream = StreamKey("f", "n")
    claim_sha = hashlib.sha1(run_once(redis_lua.CLAIM).encode()).hexdigest()
    try:
        await queue.commit([NewItem(stream, "emission", {"n": 1})])
        await asyncio.to_thread(server.stop)
        with pytest.raises(QueueUnavailable, match=r"unreachable during the BACKLOG script"):
            await queue.backlog()
        await asyncio.to_thread(server.start)
        assert server.command("SCRIPT", "EXISTS", claim_sha) == [0]
        [item] = await queue.claim("c", {stream: 1})  # NOSCRIPT -> SCRIPT LOAD -> again
        assert server.command("SCRIPT", "EXISTS", claim_sha) == [1]
        assert (item.payload, item.deliveries) == ({"n": 1}, 1)
        assert await queue.ack([item.entry_id]) == 1
    finally:
        await queue.close()


async def test_a_release_or_dead_letter_whose_answer_was_lost_runs_once(
    durable_redis_server: RedisServer, redis_calls: RedisCalls
) -> None:
    queue = RedisQueue(durable_redis_server.url, prefix="lost")
    stream = StreamKey("f", "n")
    try:
        first, second = await queue.commit(
            [NewItem(stream, "emission", {"n": 1}), NewItem(stream, "emission", {"n": 2})],
            claim_for="c",
        )
        redis_calls.lose_answer_of("RELEASE")
        assert await queue.release([first.entry_id]) == 1  # the stored answer
        redis_calls.lose_answer_of("DEAD_LETTER")
        await queue.dead_letter(second, "broken")
        assert len(redis_calls.lost) == 2
        [letter] = await queue.dead_letters("f")
        assert letter.reason == "broken"
        [again] = await queue.claim("other", {stream: 5})
        assert (again.entry_id, again.deliveries) == (first.entry_id, 2)
    finally:
        await queue.close()


async def test_a_call_in_doubt_fails_once_redis_stays_away(
    durable_redis_server: RedisServer, redis_calls: RedisCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit whose answer was lost is sent again while Redis is away, for
    IN_DOUBT_S (here shortened); then it fails like any other call."""
    monkeypatch.setattr(redis_once, "IN_DOUBT_S", 0.5)
    server = durable_redis_server
    queue = RedisQueue(server.url, prefix="doubt")
    stream = StreamKey("f", "n")
    try:
        await queue.commit([NewItem(stream, "emission", {"n": 1})])
        # The call runs, its answer is lost and Redis stops: no resend is answered.
        redis_calls.lose_answer_of("ENQUEUE", then=server.stop)
        with pytest.raises(QueueUnavailable, match=r"unreachable during the ENQUEUE script"):
            await queue.commit([NewItem(stream, "emission", {"n": 2})])
        assert redis_calls.lost and redis_calls.unreachable >= 2
    finally:
        await queue.close()


async def test_an_unreachable_redis_is_named_without_its_password() -> None:
    port = free_port()  # nobody listens there
    queue = RedisQueue(f"redis://user:s3cret@127.0.0.1:{port}/0", prefix="gone")
    try:
        with pytest.raises(QueueUnavailable) as raised:
            await queue.latest("f")
        message = str(raised.value)
        assert f"redis://user@127.0.0.1:{port}/0 unreachable during HGETALL" in message
        assert "s3cret" not in message
        with pytest.raises(QueueUnavailable, match=r"unreachable during the ENQUEUE script"):
            await queue.commit([NewItem(StreamKey("f", "n"), "emission", {})])
    finally:
        await queue.close()


async def test_a_wrong_password_is_refused_without_showing_it(tmp_path: Path) -> None:
    server = await asyncio.to_thread(launch, tmp_path / "redis")
    try:
        server.command("CONFIG", "SET", "requirepass", "right-one")
        queue = RedisQueue(f"redis://:wrong-one@127.0.0.1:{server.port}/0", prefix="auth")
        try:
            with pytest.raises(QueueUnavailable) as raised:
                await queue.parked()
            message = str(raised.value)
            assert f"127.0.0.1:{server.port}" in message and "wrong-one" not in message
        finally:
            await queue.close()
    finally:
        await asyncio.to_thread(server.stop)
