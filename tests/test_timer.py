"""The built-in ``timer`` source and guarded items: a restarted or re-configured
timer's firings still queued for a slow reader are dropped, not run late."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mediaflow import FlowBuilder, FlowSession
from mediaflow.config import EngineSettings
from mediaflow.engine.events import EventBus
from mediaflow.flows import FlowError, flow_from_dict
from tests.engine_nodes import TickLog

FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)


def timed(every_s: float) -> FlowBuilder:
    return (
        FlowBuilder("clock")
        .add("timer", "timer", every_s=every_s)
        .add("log", TickLog, delay_s=0.03, inputs={"tick": "timer.tick"})
    )


async def test_a_reconfigured_timers_queued_firings_are_dropped(tmp_path: Path) -> None:
    bus = EventBus(history=50_000)
    session = FlowSession(timed(0.005).build(), tmp_path, settings=FAST, bus=bus)
    await session.start()
    try:
        await asyncio.sleep(0.5)  # ~100 firings, ~16 run: the rest wait
        await session.reload(timed(0.02).build())
        await asyncio.sleep(0.6)
        latest = session.snapshot().latest[("timer", "tick")]
    finally:
        await session.stop()
    rates = [every for _, every in TickLog.seen]
    first_new = rates.index(0.02)
    assert set(rates[first_new:]) == {0.02}  # no old firing ran after the restart
    dropped = [e for e in bus.recent(0) if e.type == "stale_dropped"]
    assert len(dropped) > 10 and {e.data["source"] for e in dropped} == {"timer"}
    ns = [n for n, _ in TickLog.seen]
    assert ns == sorted(ns) and ns[first_new] > ns[first_new - 1]  # n goes on
    # Readers of the flow's state see the firing itself, not its guard.
    assert set(latest) == {"n", "at", "every_s"}


async def test_an_unrestarted_timer_loses_no_firing(tmp_path: Path) -> None:
    bus = EventBus(history=50_000)
    spec = FlowBuilder("clock").add("timer", "timer", every_s=0.002, count=50)
    spec = spec.add("log", TickLog, inputs={"tick": "timer.tick"})
    session = FlowSession(spec.build(), tmp_path, settings=FAST, bus=bus)
    await session.start()
    try:
        assert await asyncio.wait_for(session.wait(until_idle=True), 20) == "idle"
    finally:
        await session.stop()
    assert [n for n, _ in TickLog.seen] == list(range(1, 51))
    assert not [e for e in bus.recent(0) if e.type == "stale_dropped"]


def _timer_flow(options: dict[str, object]) -> dict[str, object]:
    return {
        "flow": {"name": "clock"},
        "node": [
            {"id": "timer", "use": "timer", **options},
            {"id": "log", "use": "tests.engine_nodes:TickLog", "inputs": {"tick": "timer.tick"}},
        ],
    }


def test_a_period_that_is_not_positive_is_refused_when_the_node_is_built() -> None:
    spec = flow_from_dict(_timer_flow({"every_s": 0}))  # of the right type: it loads
    with pytest.raises(ValueError, match=r"every_s must be a positive number of seconds"):
        spec.nodes["timer"].factory()


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"every_s": "1s"}, "option 'every_s' must be float, got '1s' (str)"),
        ({"every_s": 1, "count": 1.5}, "option 'count' must be int or None, got 1.5 (float)"),
    ],
)
def test_timer_options_of_the_wrong_type_are_refused_when_the_flow_loads(
    options: dict[str, object], refusal: str
) -> None:
    with pytest.raises(FlowError) as caught:
        flow_from_dict(_timer_flow(options))
    assert str(caught.value) == f"flow 'clock': node 'timer': {refusal}"
