"""The reducer's disable, enable and step answers, as tables (``mediaflow.engine.control``)."""

from __future__ import annotations

from mediaflow.engine.commands import (
    AckCommand,
    PublishEventCommand,
    ReleaseCommand,
    WakeClaimerCommand,
)
from mediaflow.engine.ticks import (
    ClaimedTick,
    ControlTick,
    ItemsArrivedTick,
)
from tests.reduce_helpers import ASR, CAM, REC, events, finished, fresh, item, run, starts

SOURCE = item(CAM, 1, kind="source")


def test_a_disabled_flows_source_is_told_to_end_and_hands_its_item_back() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((SOURCE,)))
    state, commands = run(state, ControlTick("f", "disable"))
    assert "flow_disabled" in events(commands)
    assert CAM in state.halted and "f" in state.disabled and "f" in state.paused
    state, commands = run(state, finished(CAM, SOURCE.entry_id, done=1))
    assert ReleaseCommand((SOURCE.entry_id,), started=True) in commands
    assert not any(isinstance(c, AckCommand) for c in commands)
    # Its item came back: it waits on disk, not in memory; nothing else starts.
    assert CAM not in state.caught_up
    state, commands = run(state, ClaimedTick((item(ASR, 1),)))
    assert starts(commands) == []


def test_a_waiting_source_item_goes_back_unstarted_and_does_not_start() -> None:
    state, _ = run(fresh(), ControlTick("f", "pause"))
    state, commands = run(state, ControlTick("f", "disable"))
    state, commands = run(state, ItemsArrivedTick((SOURCE,)))
    assert starts(commands) == []
    assert state.nodes[CAM].waiting == (SOURCE,)
    state, commands = run(fresh(), ItemsArrivedTick((SOURCE,)), ControlTick("f", "disable"))
    assert starts(commands)[:1] == [("cam", (1,), 1)]  # it had started before the disable


def test_enable_resumes_the_flow_and_fetches_the_sources_again() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((SOURCE,)), ControlTick("f", "disable"))
    state, _ = run(state, finished(CAM, SOURCE.entry_id, done=1), ClaimedTick((item(ASR, 1),)))
    state, commands = run(state, ControlTick("f", "enable"))
    assert state.disabled == frozenset() and state.halted == frozenset()
    assert "f" not in state.paused
    assert WakeClaimerCommand() in commands
    assert events(commands) == ["flow_enabled", "flow_resumed"]
    assert starts(commands) == [("asr", (1,), 1)]
    again = item(CAM, 1, deliveries=2, kind="source")
    state, commands = run(state, ClaimedTick((again,)))
    assert starts(commands) == [("cam", (1,), 1)]


def test_a_step_answers_which_item_it_started_the_oldest() -> None:
    state, _ = run(fresh(), ControlTick("f", "pause"))
    state, _ = run(state, ClaimedTick((item(REC, 7), item(ASR, 3))))
    assert starts(run(state, ClaimedTick(()))[1]) == []
    state, commands = run(state, ControlTick("f", "step"))
    assert starts(commands) == [("asr", (3,), 1)]
    (stepped,) = [c for c in commands if isinstance(c, PublishEventCommand)]
    assert stepped.event_type == "flow_stepped"
    assert (stepped.data["node"], stepped.data["seq"]) == ("asr", 3)
