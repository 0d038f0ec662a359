"""The reducer's admission, flow control and backlog rules, as tables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mediaflow.engine.commands import (
    AckCommand,
    ClaimCommand,
    JournalCommand,
    PublishEventCommand,
    RecallCommand,
    ReleaseCommand,
    StartNodeCommand,
    WakeClaimerCommand,
)
from mediaflow.engine.state import EngineState, initial_state, is_idle
from mediaflow.engine.ticks import (
    BacklogBehindTick,
    BacklogSampledTick,
    ClaimDueTick,
    ClaimedTick,
    ClaimFailedTick,
    CommitDueTick,
    CommitFailedTick,
    CommittedTick,
    ControlTick,
    ItemsArrivedTick,
    StopTick,
)
from mediaflow.queue.contract import StreamKey
from tests.reduce_helpers import (
    ASR,
    CAM,
    LIMITS,
    REC,
    acks,
    claim_wants,
    events,
    finished,
    fresh,
    item,
    journal_claims,
    run,
    starts,
)


def caught_up(state: EngineState, stream: StreamKey = ASR) -> EngineState:
    """``state`` after a claim for ``stream`` came back empty (nothing on disk)."""
    state, _ = run(state, ClaimDueTick())
    state, _ = run(state, ClaimedTick(()))
    assert stream in state.caught_up
    return state


# -- admission: claims from disk ----------------------------------------------------


def test_a_claim_wants_room_per_stream_and_one_for_a_source() -> None:
    state = fresh()
    assert claim_wants(state) == {CAM: 1, ASR: 4, REC: 4}
    state, _ = run(state, ItemsArrivedTick(tuple(item(ASR, s) for s in (1, 2, 3))))
    state, _ = run(state, ItemsArrivedTick((item(CAM, 1, kind="source"),)))
    assert claim_wants(state) == {ASR: 1, REC: 4}


def test_a_busy_line_claims_again_only_below_its_low_water_mark() -> None:
    limits = replace(LIMITS, node_buffer=8)  # low water: 2 free places
    state, _ = run(fresh(limits), ItemsArrivedTick(tuple(item(ASR, s) for s in range(7))))
    assert ASR not in claim_wants(state)  # 1 free place: wait for more room
    state, _ = run(state, finished(ASR, "asr-0-1", done=1))
    assert claim_wants(state)[ASR] == 2


def test_one_claim_at_a_time() -> None:
    state, commands = run(fresh(), ClaimDueTick())
    assert [c for c in commands if isinstance(c, ClaimCommand)]
    assert run(state, ClaimDueTick())[1] == []  # the first is still in flight
    state, _ = run(state, ClaimFailedTick())
    assert claim_wants(state)  # a failed claim can be asked again


def test_caught_up_streams_are_claimed_only_when_polling() -> None:
    state = caught_up(fresh())
    assert ASR not in claim_wants(state)  # its new work arrives at enqueue
    assert claim_wants(state, poll=True)[ASR] == 4  # other processes' work


def test_a_short_claim_proves_caught_up_only_if_nothing_was_left_on_disk_meanwhile() -> None:
    state, _ = run(fresh(), ClaimDueTick())
    state, _ = run(state, BacklogBehindTick(frozenset({ASR})))  # left on disk mid-claim
    state, _ = run(state, ClaimedTick(()))
    assert ASR not in state.caught_up and REC in state.caught_up


def test_a_claimed_batch_is_admitted_and_started() -> None:
    state, _ = run(fresh(), ClaimDueTick())
    _, commands = run(state, ClaimedTick((item(ASR, 1), item(ASR, 2))))
    assert starts(commands) == [("asr", (1, 2), 1)]


# -- admission: claims at enqueue (the group commit) ---------------------------------


def test_local_claim_needs_caught_up_room_and_no_pause() -> None:
    state = fresh()
    assert journal_claims(state, {ASR: 10}) == {}  # nothing proved yet
    state = caught_up(state)
    assert journal_claims(state, {ASR: 10}) == {ASR: 4}
    state, _ = run(state, BacklogBehindTick(frozenset({ASR})))
    assert journal_claims(state, {ASR: 10}) == {}
    state = caught_up(state)
    busy, _ = run(state, ItemsArrivedTick(tuple(item(ASR, s) for s in (1, 2, 3))))
    assert journal_claims(busy, {ASR: 10}) == {ASR: 1}
    full, _ = run(busy, ItemsArrivedTick((item(ASR, 4),)))
    assert journal_claims(full, {ASR: 10}) == {}
    paused, _ = run(state, ControlTick("f", "pause"))
    assert journal_claims(paused, {ASR: 10}) == {}
    # A paused flow's empty claims prove nothing: it stays behind until resumed.
    paused, _ = run(paused, ClaimDueTick())
    paused, _ = run(paused, ClaimedTick(()))
    resumed, _ = run(paused, ControlTick("f", "resume"))
    assert journal_claims(resumed, {ASR: 10}) == {}


def test_what_a_commit_leaves_on_disk_makes_the_stream_behind() -> None:
    state = caught_up(fresh())
    state, commands = run(state, CommitDueTick({ASR: 6}))
    assert JournalCommand({ASR: 4}) in commands and WakeClaimerCommand() in commands
    assert ASR not in state.caught_up


def test_a_commit_in_flight_reserves_its_room() -> None:
    state = caught_up(fresh())
    state, _ = run(state, CommitDueTick({ASR: 3}))
    assert claim_wants(state, poll=True)[ASR] == 1  # 4 places, 3 promised
    state, commands = run(state, CommittedTick(tuple(item(ASR, s) for s in (1, 2, 3))))
    assert starts(commands) == [("asr", (1, 2, 3), 1)]
    assert state.reserved == {} and ASR in state.caught_up


def test_a_commit_the_queue_claimed_less_of_makes_the_stream_behind() -> None:
    # Older work of the stream was on disk (another process's): the queue kept
    # ours ready rather than let it overtake.
    state = caught_up(fresh())
    state, _ = run(state, CommitDueTick({ASR: 2}))
    state, commands = run(state, CommittedTick((item(ASR, 1),)))
    assert ASR not in state.caught_up and WakeClaimerCommand() in commands
    assert state.reserved == {}


def test_a_failed_commit_gives_its_reservation_back() -> None:
    state = caught_up(fresh())
    state, _ = run(state, CommitDueTick({ASR: 4}))
    state, _ = run(state, CommitFailedTick())
    assert state.reserved == {} and journal_claims(state, {ASR: 4}) == {ASR: 4}


# -- pause, step, stop -------------------------------------------------------------


def test_pause_holds_items_and_step_starts_exactly_one_oldest_first() -> None:
    state, _ = run(fresh(), ControlTick("f", "pause"))
    state, commands = run(state, ItemsArrivedTick((item(REC, 2), item(ASR, 3), item(ASR, 4))))
    assert starts(commands) == []
    state, commands = run(state, ControlTick("f", "step"))
    assert starts(commands) == [("rec", (2,), 1)]
    assert WakeClaimerCommand() in commands  # the queue lets one more through
    state, commands = run(state, ControlTick("f", "step"))
    assert starts(commands) == [("asr", (3,), 1)]
    state, commands = run(state, finished(ASR, "asr-3-1", done=1))
    assert starts(commands) == []  # no step left
    state, commands = run(state, ControlTick("f", "resume"))
    assert starts(commands) == [("asr", (4,), 1)]
    assert events(commands) == ["flow_resumed"]


def test_pause_recalls_a_running_batch_and_keeps_its_rest_in_line() -> None:
    state, _ = run(fresh(), ItemsArrivedTick(tuple(item(ASR, s) for s in (1, 2, 3))))
    state, commands = run(state, ControlTick("f", "pause"))
    assert RecallCommand(ASR) in commands and events(commands) == ["flow_paused"]
    state, commands = run(state, finished(ASR, "asr-1-1", done=1))  # it stopped after seq 1
    assert acks(commands) == [("asr-1-1",)] and starts(commands) == []
    state, commands = run(state, ControlTick("f", "step"))
    assert starts(commands) == [("asr", (2,), 1)]
    state, _ = run(state, finished(ASR, "asr-2-1", done=1))
    _, commands = run(state, ControlTick("f", "resume"))
    assert starts(commands) == [("asr", (3,), 1)]


def test_pause_recalls_nothing_it_need_not() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(CAM, 1, kind="source"), item(ASR, 1))))
    _, commands = run(state, ControlTick("f", "pause"))
    assert not [c for c in commands if isinstance(c, RecallCommand)]  # a source; one item


def test_sources_run_while_paused() -> None:
    state, _ = run(fresh(), ControlTick("f", "pause"))
    _, commands = run(state, ItemsArrivedTick((item(CAM, 1, kind="source"),)))
    assert starts(commands) == [("cam", (1,), 1)]


def test_step_without_pause_does_nothing() -> None:
    assert run(fresh(), ControlTick("f", "step"))[1] == []


def test_stop_releases_waiting_items_and_starts_nothing_more() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1),)))
    state, _ = run(state, ItemsArrivedTick((item(ASR, 2), item(ASR, 3))))
    state, commands = run(state, StopTick())
    assert commands == [ReleaseCommand(("asr-2-1", "asr-3-1"))]
    state, commands = run(state, finished(ASR, "asr-1-1", done=1))
    assert commands == [AckCommand(("asr-1-1",)), _wake()]
    assert is_idle(state) and claim_wants(state) == {}
    _, commands = run(state, ItemsArrivedTick((item(ASR, 9),)))
    assert commands == [ReleaseCommand(("asr-9-1",))]


def test_stop_recalls_a_running_batch_and_releases_its_rest_unstarted() -> None:
    state, _ = run(fresh(), ItemsArrivedTick(tuple(item(ASR, s) for s in (1, 2, 3))))
    state, commands = run(state, StopTick())
    assert commands == [RecallCommand(ASR)]
    state, commands = run(state, finished(ASR, "asr-1-1", done=1))
    assert AckCommand(("asr-1-1",)) in commands
    assert ReleaseCommand(("asr-2-1", "asr-3-1")) in commands and starts(commands) == []
    assert is_idle(state)


def test_failure_while_stopping_releases_instead_of_retrying() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1),)))
    state, _ = run(state, StopTick())
    _, commands = run(state, finished(ASR, "asr-1-1", done=0, error="cancelled"))
    assert ReleaseCommand(("asr-1-1",), started=True) in commands
    assert not [c for c in commands if isinstance(c, StartNodeCommand)]


def _wake() -> WakeClaimerCommand:
    return WakeClaimerCommand()


# -- after a crash -------------------------------------------------------------------


def test_a_resumed_run_drains_carefully_one_item_at_a_time() -> None:
    state = fresh(resumed=True)
    assert state.careful == frozenset({ASR, REC})
    assert claim_wants(state) == {CAM: 1, ASR: 1, REC: 1}
    state, commands = run(state, ItemsArrivedTick((item(ASR, 1, deliveries=2),)))
    (start,) = [c for c in commands if isinstance(c, StartNodeCommand)]
    assert start.commit_first  # acks are durable before it may crash us again
    assert claim_wants(state) == {CAM: 1, REC: 1}  # the line holds only the running item
    state, _ = run(state, finished(ASR, "asr-1-2", done=1))
    state = caught_up(state)
    assert ASR not in state.careful and journal_claims(state, {ASR: 9}) == {ASR: LIMITS.node_buffer}


def test_a_careful_stream_runs_first_deliveries_one_at_a_time_too() -> None:
    state = fresh(resumed=True)
    _, commands = run(state, ItemsArrivedTick((item(ASR, 1), item(ASR, 2))))
    (start,) = [c for c in commands if isinstance(c, StartNodeCommand)]
    assert [i.seq for i in start.items] == [1] and start.commit_first


# -- backlog ---------------------------------------------------------------------

BACKLOG_LIMITS = replace(LIMITS, degraded_samples=3, degraded_min_items=100)


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        pytest.param([50, 80, 99], [], id="growing but small"),
        pytest.param([100, 200, 300], ["engine_degraded"], id="growing over the floor"),
        pytest.param([300, 200, 400], [], id="not monotonic"),
        pytest.param([100, 200, 300, 400], ["engine_degraded"], id="reported once"),
        pytest.param([100, 200, 300, 250], ["engine_degraded", "engine_recovered"], id="recovers"),
    ],
)
def test_backlog_degraded(samples: list[int], expected: list[str]) -> None:
    state = initial_state(BACKLOG_LIMITS, [ASR, StreamKey("g", "x")])
    seen: list[str] = []
    for total in samples:
        state, commands = run(state, BacklogSampledTick({"f": total - 10, "g": 10}))
        seen += events(commands)
    assert seen == expected


def test_degraded_names_the_flow_with_most_work() -> None:
    state = initial_state(BACKLOG_LIMITS, [ASR])
    for total in (1000, 2000):
        state, _ = run(state, BacklogSampledTick({"small": 5, "big": total}))
    _, commands = run(state, BacklogSampledTick({"small": 5, "big": 3000}))
    (event,) = [c for c in commands if isinstance(c, PublishEventCommand)]
    assert event.data["flow"] == "big" and event.data["backlog"] == 3005
