"""What the Redis outage tests (``tests/test_redis_outage.py``) share: a paced
source, a slow recording sink, a queue wrapper that watches every call, a
session run across a Redis stop and start, and the ``redis_calls`` fixture that
watches (and can lose the answer of) every command redis-py sends.

Import the fixture by its function name (``redis_calls_fixture``)."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest
import redis
import redis.asyncio

from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.events import Event, EventBus
from mediaflow.queue.contract import EmissionRun, QueueUnavailable, WorkQueue
from mediaflow.queue.redis import lua as redis_lua
from mediaflow.queue.redis import lua_admin as redis_lua_admin
from mediaflow.queue.redis.once import run_once
from mediaflow.queue.redis.queue import RedisQueue
from tests.redis_server import RedisServer

FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)
QUEUE_EVENTS = frozenset({"queue_unavailable", "queue_available"})
DEADLINE_S = 30.0  # generous: a run that needs this long is stuck, not slow


class PacedSource(Node):
    """Emits ``{"seq": n}`` for n in ``range(count)``, ``burst`` values then a
    ``period_s`` pause; ``emitted`` lists the seqs whose ``emit`` returned."""

    outputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}

    def __init__(self, count: int, burst: int, period_s: float) -> None:
        self.count = count
        self.burst = burst
        self.period_s = period_s
        self.emitted: list[int] = []

    async def run(self, ctx: Context) -> None:
        start = 0
        if ctx.redelivery:  # resumed: carry on after the last value journaled
            last = ctx.more.latest("chunk")
            start = last["seq"] + 1 if last else 0
        for seq in range(start, self.count):
            if ctx.stopping():
                return
            await ctx.emit("chunk", {"seq": seq})
            self.emitted.append(seq)
            if (seq + 1) % self.burst == 0:
                await asyncio.sleep(self.period_s)


@dataclass(frozen=True)
class Run:
    """One run of the sink: the seq it carried and how the item was delivered."""

    seq: int
    entry_id: str
    deliveries: int
    redelivery: bool
    acked_before: bool  # a commit carrying this item's ack had already returned


class SlowSink(Node):
    """Sleeps ``delay_s`` per item (a consumer a bit slower than its source) and
    records every run, noting whether the queue had already confirmed its ack."""

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}

    def __init__(self, watched: WatchedQueue, delay_s: float) -> None:
        self.watched = watched
        self.delay_s = delay_s
        self.runs: list[Run] = []

    async def run(self, ctx: Context) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        item = ctx.item
        assert item is not None
        seq = ctx.inputs["chunk"]["seq"]
        acked = item.entry_id in self.watched.acked
        self.runs.append(Run(seq, item.entry_id, item.deliveries, ctx.redelivery, acked))


class WatchedQueue:
    """A :class:`RedisQueue` seen from outside: forwards every call, notes the
    calls that found Redis unavailable, and records what the queue confirmed (the
    acks and emitted seqs of every ``commit`` or ``ack`` that returned)."""

    def __init__(self, inner: RedisQueue) -> None:
        self.inner = inner
        self.unavailable: list[tuple[str, str]] = []  # (method, error) of each such call
        self.acked: set[str] = set()
        self.committed: list[int] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = await attr(*args, **kwargs)
            except QueueUnavailable as exc:
                self.unavailable.append((name, str(exc)))
                raise
            self._confirmed(name, args, kwargs)
            return result

        return call

    def _confirmed(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if name == "commit":
            self.acked.update(kwargs.get("ack", ()))
            for run in args[0]:
                if isinstance(run, EmissionRun):  # not a run's source items
                    self.committed.extend(value["seq"] for value in run.values)
        elif name == "ack":
            self.acked.update(args[0])


@dataclass
class OutageRun:
    """A flow ``src`` -> ``sink`` on a Redis queue, and what happened to it."""

    source: PacedSource
    sink: SlowSink
    queue: WatchedQueue
    bus: EventBus
    session: FlowSession
    events: list[Event] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        url: str,
        data: Path,
        *,
        count: int,
        burst: int,
        period_s: float,
        delay_s: float,
        settings: EngineSettings = FAST,
    ) -> OutageRun:
        queue = WatchedQueue(RedisQueue(url, prefix="outage"))
        source = PacedSource(count, burst, period_s)
        sink = SlowSink(queue, delay_s)
        flow = FlowBuilder("outage").add("src", source)
        flow.add("sink", sink, inputs={"chunk": "src.chunk"})
        bus = EventBus(history=100_000)
        session = FlowSession(
            flow.build(), data, queue=cast(WorkQueue, queue), settings=settings, bus=bus
        )
        return cls(source, sink, queue, bus, session)

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        """Wait (polling) until ``condition()``; fail naming ``what`` after DEADLINE_S."""
        deadline = time.monotonic() + DEADLINE_S
        while not condition():
            assert time.monotonic() < deadline, f"gave up waiting for {what}"
            await asyncio.sleep(0.01)

    async def through_outage(self, after_runs: int, outage: Callable[[], Awaitable[None]]) -> None:
        """Start the run, let the sink run ``after_runs`` items, await ``outage``
        (Redis goes away and comes back) and wait until the run is idle; stops
        the session either way. Queue events land in :attr:`events`."""
        subscription = self.bus.subscribe(types=QUEUE_EVENTS, maxsize=10_000)
        await self.session.start()
        try:
            await self.until(lambda: len(self.sink.runs) >= after_runs, "the first runs")
            await outage()
            reason = await asyncio.wait_for(self.session.wait(until_idle=True), DEADLINE_S)
            assert reason == "idle"
        finally:
            await self.session.stop()
            while (event := subscription.get_nowait()) is not None:
                self.events.append(event)
            subscription.close()

    def assert_every_value_consumed_in_order(self) -> None:
        """Every seq the source emitted ran; first deliveries in the source's order;
        a seq that ran again did so as a marked redelivery."""
        runs = self.sink.runs
        count = self.source.count
        assert self.source.emitted == list(range(count))
        assert sorted({run.seq for run in runs}) == list(range(count))
        firsts = [run for run in runs if not run.redelivery]
        for before, after in pairwise(firsts):
            assert before.seq < after.seq, f"first deliveries out of order: {before}, {after}"
        seen: set[int] = set()
        for run in runs:
            if run.seq in seen:
                assert run.redelivery and run.deliveries > 1, f"unmarked duplicate: {run}"
            seen.add(run.seq)


def assert_left_in_redis(server: RedisServer, *, appended: int, waiting: int) -> None:
    """The sink's stream had ``appended`` items in all (its seq counter: a commit
    applied twice shows as more) and ``waiting`` are left (an ack deletes)."""
    assert server.command("HGET", "outage:seq", "outage/sink") == str(appended).encode()
    assert server.command("XLEN", "outage:s:outage/sink") == waiting


class Steadiness:
    """True once a list has kept its length for ``quiet_s`` seconds."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s
        self._length = -1
        self._since = 0.0

    def __call__(self, values: list[int]) -> bool:
        now = time.monotonic()
        if len(values) != self._length:
            self._length, self._since = len(values), now
        return now - self._since >= self.quiet_s


@pytest.fixture(name="redis_calls")
def redis_calls_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisCalls]:
    """Every command redis-py's asyncio client sends in this test, watched."""
    calls = RedisCalls()
    real = redis.asyncio.Redis.execute_command

    async def watched(client: redis.asyncio.Redis, *args: Any, **options: Any) -> Any:
        return await calls.send(real, client, args, options)

    monkeypatch.setattr(redis.asyncio.Redis, "execute_command", watched)
    yield calls


class RedisCalls:
    """Counts commands that could not reach Redis and, when told to, loses the
    answer of one call of a script after Redis ran it (:meth:`lose_answer_of`)."""

    def __init__(self) -> None:
        self.unreachable = 0
        self.lost: list[Any] = []
        self._lose: tuple[str, int] | None = None  # (sha, least array length)
        self._then: Callable[[], object] = lambda: None

    def lose_answer_of(self, script: str, then: Callable[[], object] = lambda: None) -> None:
        """The next call of ``script`` (a run-once script of :mod:`.lua`) that
        does something runs, and then its connection drops before the answer is
        read, as when Redis shuts down between running a call and answering;
        ``then()`` is called at that moment."""
        source = getattr(redis_lua, script, None) or getattr(redis_lua_admin, script)
        sha = hashlib.sha1(run_once(source).encode()).hexdigest()
        # An ENQUEUE answer ends with the number acked; items come before it.
        self._lose = (sha, 2 if script == "ENQUEUE" else 1)
        self._then = then

    async def send(self, real: Any, client: Any, args: tuple[Any, ...], options: Any) -> Any:
        try:
            answer = await real(client, *args, **options)
        except (redis.ConnectionError, redis.TimeoutError):
            self.unreachable += 1
            raise
        lose = self._lose
        if (
            lose is not None
            and args[:2] == ("EVALSHA", lose[0])
            and (not isinstance(answer, list) or len(answer) >= lose[1])
        ):
            self._lose = None
            self.lost.append(answer)
            self._then()
            raise redis.ConnectionError("Connection closed by server.")
        return answer
