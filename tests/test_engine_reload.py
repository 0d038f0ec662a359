"""Reloading a running flow (``FlowSession.reload``) while a slow consumer has a
backlog, on both queue backends: claimed work finishes on the old nodes, every
queued item reaches the new ones, a removed node's items are dead-lettered with
the reason, unchanged sources keep running and a changed one resumes where it
was. Nothing is lost, nothing runs twice unmarked."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter as Tally
from pathlib import Path

import pytest

from mediaflow import FlowBuilder, FlowSession
from mediaflow.config import EngineSettings
from mediaflow.engine.events import EventBus
from mediaflow.engine.reload import ReloadRefused, plan_reload
from tests.engine_nodes import Counter, Recorder
from tests.redis_server import RedisServer

FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)
COUNT = 400


@pytest.fixture(params=["sqlite", "redis"])
def queue_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    server: RedisServer = request.getfixturevalue("redis_server")
    return f"{server.url}?prefix=reload-{uuid.uuid4().hex[:8]}"


def flow(where: Path, *, sink_delay: float, extra: bool, added: bool, pad: int = 0) -> FlowBuilder:
    builder = (
        FlowBuilder("reloadable")
        .add("src", Counter, count=COUNT, period_s=0.002, pad=pad)
        .add(
            "sink",
            Recorder,
            delay_s=sink_delay,
            log_file=str(where / "sink.log"),
            inputs={"chunk": "src.chunk"},
        )
    )
    if extra:
        builder = builder.add(
            "extra", Recorder, delay_s=0.01, inputs={"chunk": "src.chunk"}, name="extra"
        )
    if added:
        builder = builder.add(
            "late", Recorder, log_file=str(where / "late.log"), inputs={"chunk": "src.chunk"}
        )
    return builder


def deliveries(log: Path) -> list[tuple[int, int]]:
    return [(int(s), int(d)) for s, d, _ in (line.split() for line in log.read_text().splitlines())]


def check_nothing_lost(log: Path, seqs: range) -> None:
    seen = deliveries(log)
    assert {seq for seq, _ in seen} == set(seqs)
    counts = Tally(seq for seq, _ in seen)
    for seq, times in counts.items():
        if times > 1:  # a repeat is marked: every delivery after the first says so
            assert sorted(d for s, d in seen if s == seq)[1:] == list(range(2, times + 1))
    firsts = [seq for seq, d in seen if d == 1]
    assert firsts == sorted(firsts)


async def test_reload_rebuilds_adds_and_removes_nodes_losing_nothing(
    tmp_path: Path, queue_url: str | None
) -> None:
    bus = EventBus(history=50_000)
    old = flow(tmp_path, sink_delay=0.01, extra=True, added=False).build()
    session = FlowSession(old, tmp_path / "data", queue_url=queue_url, settings=FAST, bus=bus)
    await session.start()
    try:
        while len(Recorder.seen.get("extra", [])) < 20:
            await asyncio.sleep(0.02)
        new = flow(tmp_path, sink_delay=0.001, extra=False, added=True).build()
        plan = await session.reload(new)
        assert (plan.kept, plan.changed, plan.added, plan.removed) == (
            ("src",),
            ("sink",),
            ("late",),
            ("extra",),
        )
        assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
        dead = await session.queue.dead_letters("reloadable", limit=COUNT)
    finally:
        await session.stop()
    check_nothing_lost(tmp_path / "sink.log", range(COUNT))
    # The removed node ran part of what was queued for it; the rest was
    # dead-lettered with the reason: together, every chunk up to the reload.
    ran = Recorder.seen["extra"]
    assert all("removed" in d.reason and d.item.stream.node == "extra" for d in dead)
    left = sorted(d.item.payload["value"]["seq"] for d in dead)
    assert dead and sorted(ran + left) == list(range(len(ran) + len(left)))
    # The added node sees what was emitted after the reload, in order.
    late = [seq for seq, _ in deliveries(tmp_path / "late.log")]
    assert late == list(range(late[0], COUNT))
    events = [e for e in bus.recent(0)]
    assert [e.type for e in events].count("source_started") == 1  # unchanged: kept running
    (reloaded,) = [e for e in events if e.type == "flow_reloaded"]
    assert reloaded.data["removed"] == ["extra"]
    assert session.snapshot().status != "paused"


async def test_a_changed_source_restarts_where_it_was(
    tmp_path: Path, queue_url: str | None
) -> None:
    bus = EventBus(history=50_000)
    old = flow(tmp_path, sink_delay=0.0, extra=False, added=False).build()
    session = FlowSession(old, tmp_path / "data", queue_url=queue_url, settings=FAST, bus=bus)
    await session.start()
    try:
        while not (tmp_path / "sink.log").exists() or len(deliveries(tmp_path / "sink.log")) < 50:
            await asyncio.sleep(0.02)
        plan = await session.reload(
            flow(tmp_path, sink_delay=0.0, extra=False, added=False, pad=8).build()
        )
        assert plan.changed == ("src",)
        assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
    finally:
        await session.stop()
    check_nothing_lost(tmp_path / "sink.log", range(COUNT))
    started = [e for e in bus.recent(0) if e.type == "source_started"]
    assert [e.data["redelivery"] for e in started] == [False, True]


async def test_a_paused_flow_stays_paused_and_another_flows_file_is_refused(
    tmp_path: Path,
) -> None:
    old = flow(tmp_path, sink_delay=0.0, extra=True, added=False).build()
    session = FlowSession(old, tmp_path / "data", settings=FAST)
    await session.start()
    try:
        await session.pause()
        await asyncio.sleep(0.1)
        await session.reload(flow(tmp_path, sink_delay=0.0, extra=False, added=False).build())
        assert session.snapshot().status == "paused"
        other = FlowBuilder("other").add("src", Counter, count=1).build()
        with pytest.raises(ReloadRefused, match="other"):
            await session.reload(other)
        await session.resume()
        assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
    finally:
        await session.stop()
    check_nothing_lost(tmp_path / "sink.log", range(COUNT))


def test_an_unchanged_file_plans_nothing(tmp_path: Path) -> None:
    spec = flow(tmp_path, sink_delay=0.0, extra=True, added=False).build()
    again = flow(tmp_path, sink_delay=0.0, extra=True, added=False).build()
    plan = plan_reload(spec, again)
    assert plan.is_noop and plan.kept == ("src", "sink", "extra")
