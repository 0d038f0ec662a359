"""``max_rate``: a node runs at most that often, coalescing to the newest item,
and the last value of a window always gets out (when the window ends)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mediaflow import FlowBuilder, FlowError, FlowSession
from mediaflow.config import EngineSettings
from mediaflow.engine.commands import AckCommand, WakeAtCommand
from mediaflow.engine.events import EventBus
from mediaflow.engine.state import EngineState, initial_state
from mediaflow.engine.ticks import ClaimedTick, TimerTick
from mediaflow.flows import flow_from_dict
from tests.engine_nodes import Counter, Recorder
from tests.reduce_helpers import ASR, CAM, LIMITS, REC, events, finished, item, run, starts

FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)


def rated() -> EngineState:
    return initial_state(LIMITS, [CAM, ASR, REC], [CAM], rates={ASR: 0.5})


def test_a_rated_node_runs_the_newest_and_waits_for_its_window() -> None:
    state, commands = run(rated(), ClaimedTick((item(ASR, 1),)), now=10.0)
    assert starts(commands) == [("asr", (1,), 1)]
    assert WakeAtCommand(10.5) in commands
    state, commands = run(state, ClaimedTick((item(ASR, 2), item(ASR, 3))), now=10.1)
    state, commands = run(state, finished(ASR, "asr-1-1", done=1), now=10.2)
    assert starts(commands) == []  # the window is not over
    state, commands = run(state, ClaimedTick((item(ASR, 4),)), now=10.3)
    state, commands = run(state, TimerTick(), now=10.5)
    # The window's last value runs; those it replaced are acked unrun.
    assert starts(commands) == [("asr", (4,), 1)]
    assert AckCommand(("asr-2-1", "asr-3-1")) in commands
    assert events(commands) == ["items_coalesced"]
    # Other streams are not limited.
    _, commands = run(state, ClaimedTick((item(REC, 1), item(REC, 2))), now=10.5)
    assert starts(commands) == [("rec", (1, 2), 1)]


def test_max_rate_is_checked_in_the_flow_file() -> None:
    def flow(rate: object, node: str = "sink") -> dict[str, object]:
        nodes: list[dict[str, object]] = [
            {"id": "src", "use": "tests.engine_nodes:Counter"},
            {"id": "sink", "use": "tests.engine_nodes:Recorder", "inputs": {"chunk": "src.chunk"}},
        ]
        next(n for n in nodes if n["id"] == node)["max_rate"] = rate
        return {"flow": {"name": "r"}, "node": nodes}

    assert flow_from_dict(flow(2.5)).nodes["sink"].max_rate == 2.5
    for bad, message in [
        (0, "positive"),
        (-1, "positive"),
        ("fast", "positive"),
        (True, "positive"),
    ]:
        with pytest.raises(FlowError, match=message):
            flow_from_dict(flow(bad))
    with pytest.raises(FlowError, match="source"):
        flow_from_dict(flow(1, node="src"))


async def test_a_fast_stream_reaches_a_rated_node_coalesced_and_its_last_value_gets_out(
    tmp_path: Path,
) -> None:
    spec = (
        FlowBuilder("rated")
        .add("src", Counter, count=300, period_s=0.002)
        .add("sink", Recorder, inputs={"chunk": "src.chunk"}, max_rate=10)
        .build()
    )
    bus = EventBus(history=10_000)
    session = FlowSession(spec, tmp_path, settings=FAST, bus=bus)
    await session.start()
    try:
        assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
    finally:
        await session.stop()
    ran = Recorder.seen["sink"]
    assert ran[-1] == 299  # the last value got out
    assert ran == sorted(ran) and len(ran) < 60  # ~0.6 s at 10 per second, coalesced
    skipped = sum(e.data["skipped"] for e in bus.recent(0) if e.type == "items_coalesced")
    assert skipped + len(ran) == 300  # every item ran or was coalesced away
