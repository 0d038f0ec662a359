"""The scheduling reducer as tables: state and tick in, state and commands out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mediaflow.engine.commands import (
    AckCommand,
    DeadLetterCommand,
    PublishEventCommand,
    ReleaseCommand,
    StartNodeCommand,
    WakeAtCommand,
)
from mediaflow.engine.reduce import (
    EngineState,
    Limits,
    backoff_s,
    held_ids,
    initial_state,
    is_idle,
    local_room,
    reduce,
    wants,
)
from mediaflow.engine.ticks import (
    BacklogBehindTick,
    BacklogSampledTick,
    ItemsArrivedTick,
    NodeFinishedTick,
    PauseTick,
    ResumeTick,
    StepTick,
    StopTick,
    TimerTick,
)
from mediaflow.queue.contract import StreamKey, WorkItem

CAM = StreamKey("f", "cam")
ASR = StreamKey("f", "asr")
REC = StreamKey("f", "rec")
LIMITS = Limits(max_deliveries=3, max_attempts=3, retry_base_s=1.0, retry_max_s=4.0, node_buffer=4)


def item(stream: StreamKey, seq: int, deliveries: int = 1, kind: str = "emission") -> WorkItem:
    return WorkItem(
        entry_id=f"{stream.node}-{seq}-{deliveries}",
        stream=stream,
        kind=kind,  # type: ignore[arg-type]
        payload={"seq": seq},
        seq=seq,
        deliveries=deliveries,
        enqueued_at=float(seq),
    )


def fresh(limits: Limits = LIMITS) -> EngineState:
    return initial_state(limits, [CAM, ASR, REC], [CAM])


def starts(commands: list[object]) -> list[tuple[str, int, int]]:
    return [
        (c.item.stream.node, c.item.seq, c.attempt)
        for c in commands
        if isinstance(c, StartNodeCommand)
    ]


def events(commands: list[object]) -> list[str]:
    return [c.event_type for c in commands if isinstance(c, PublishEventCommand)]


def run(state: EngineState, *ticks: object, now: float = 0.0) -> tuple[EngineState, list[object]]:
    out: list[object] = []
    for tick in ticks:
        state, commands = reduce(state, tick, now)  # type: ignore[arg-type]
        out.extend(commands)
    return state, out


# -- routing and ordering -------------------------------------------------------

ROUTING_CASES = [
    # (arrivals, expected starts)
    pytest.param([item(ASR, 1)], [("asr", 1, 1)], id="one item starts its node"),
    pytest.param(
        [item(ASR, 1), item(ASR, 2), item(ASR, 3)],
        [("asr", 1, 1)],
        id="a node runs one item at a time, oldest first",
    ),
    pytest.param(
        [item(ASR, 1), item(REC, 1)],
        [("asr", 1, 1), ("rec", 1, 1)],
        id="independent nodes start together (fan-out readers)",
    ),
    pytest.param(
        [item(ASR, 5), item(ASR, 2, deliveries=2)],
        [("asr", 2, 1)],
        id="a batch is ordered by seq: a redelivered older item goes first",
    ),
    pytest.param(
        [item(CAM, 1, kind="source")], [("cam", 1, 1)], id="a source item starts the source"
    ),
]


@pytest.mark.parametrize(("arrivals", "expected"), ROUTING_CASES)
def test_routing(arrivals: list[WorkItem], expected: list[tuple[str, int, int]]) -> None:
    _, commands = run(fresh(), ItemsArrivedTick(tuple(arrivals)))
    assert starts(commands) == expected


def test_ordering_per_edge_with_many_in_flight() -> None:
    state, commands = run(fresh(), ItemsArrivedTick(tuple(item(ASR, s) for s in (1, 2, 3, 4))))
    seen = starts(commands)
    for seq in (1, 2, 3):
        state, commands = run(state, NodeFinishedTick(ASR, f"asr-{seq}-1"))
        assert [c.entry_id for c in commands if isinstance(c, AckCommand)] == [f"asr-{seq}-1"]
        seen += starts(commands)
    assert seen == [("asr", 1, 1), ("asr", 2, 1), ("asr", 3, 1), ("asr", 4, 1)]


def test_redelivered_item_overtakes_younger_waiting_items() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 4), item(ASR, 6))))
    state, _ = run(state, ItemsArrivedTick((item(ASR, 5, deliveries=2),)))
    state, commands = run(state, NodeFinishedTick(ASR, "asr-4-1"))
    assert starts(commands) == [("asr", 5, 1)]


def test_duplicate_arrival_of_a_held_item_is_ignored() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1), item(ASR, 2))))
    # Our lease lapsed, the item was reclaimed and claimed by us again.
    again = replace(item(ASR, 2), deliveries=2)
    state, commands = run(state, ItemsArrivedTick((again,)))
    assert commands == []
    assert held_ids(state) == ["asr-1-1", "asr-2-1"]


def test_finish_for_an_item_not_running_is_ignored() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1),)))
    assert run(state, NodeFinishedTick(ASR, "nope"))[1] == []


# -- retry, dead-letter and MAX_DELIVERIES ----------------------------------------

RETRY_TABLE = [
    # attempt that failed, expected delay before the next
    (1, 1.0),
    (2, 2.0),
    (3, 4.0),
    (4, 4.0),
]


@pytest.mark.parametrize(("attempt", "delay"), RETRY_TABLE)
def test_backoff_doubles_and_caps(attempt: int, delay: float) -> None:
    assert backoff_s(LIMITS, attempt) == delay


def test_failed_item_retries_with_backoff_keeping_its_place() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1), item(ASR, 2))), now=10.0)
    state, commands = run(state, NodeFinishedTick(ASR, "asr-1-1", error="boom"), now=10.0)
    assert starts(commands) == []  # seq 2 must not overtake the failed seq 1
    assert WakeAtCommand(11.0) in commands
    assert events(commands) == ["cascade_retry"]
    state, commands = run(state, TimerTick(), now=10.5)
    assert starts(commands) == []  # backoff not over
    state, commands = run(state, TimerTick(), now=11.0)
    assert starts(commands) == [("asr", 1, 2)]
    state, commands = run(state, NodeFinishedTick(ASR, "asr-1-1"), now=11.2)
    assert AckCommand("asr-1-1") in commands
    assert starts(commands) == [("asr", 2, 1)]


def test_dead_letter_after_max_attempts_then_next_item_runs() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1), item(ASR, 2))))
    now = 0.0
    for _attempt in range(LIMITS.max_attempts - 1):
        state, _ = run(state, NodeFinishedTick(ASR, "asr-1-1", error="boom"), now=now)
        now += 100
        state, _ = run(state, TimerTick(), now=now)
    state, commands = run(state, NodeFinishedTick(ASR, "asr-1-1", error="boom"), now=now)
    dead = [c for c in commands if isinstance(c, DeadLetterCommand)]
    assert [d.item.seq for d in dead] == [1] and dead[0].reason == "boom"
    assert events(commands) == ["cascade_dropped"]
    assert starts(commands) == [("asr", 2, 1)]


@pytest.mark.parametrize(
    ("deliveries", "dropped"),
    [(1, False), (3, False), (4, True), (9, True)],
)
def test_max_deliveries(deliveries: int, dropped: bool) -> None:
    _, commands = run(fresh(), ItemsArrivedTick((item(ASR, 1, deliveries=deliveries),)))
    assert bool([c for c in commands if isinstance(c, DeadLetterCommand)]) is dropped
    assert bool(starts(commands)) is not dropped
    if dropped:
        assert events(commands) == ["cascade_dropped"]


def test_item_for_an_unknown_node_is_dead_lettered() -> None:
    stray = item(StreamKey("f", "gone"), 1)
    _, commands = run(fresh(), ItemsArrivedTick((stray,)))
    assert isinstance(commands[0], DeadLetterCommand) and "gone" in commands[0].reason


# -- bounded lines and local claims ----------------------------------------------


def test_wants_reports_room_per_stream_and_one_for_a_source() -> None:
    state = fresh()
    assert wants(state) == {CAM: 1, ASR: 4, REC: 4}
    state, _ = run(state, ItemsArrivedTick(tuple(item(ASR, s) for s in (1, 2, 3))))
    state, _ = run(state, ItemsArrivedTick((item(CAM, 1, kind="source"),)))
    assert wants(state) == {ASR: 1, REC: 4}


def test_local_claim_needs_caught_up_room_and_no_pause() -> None:
    state = fresh()
    assert local_room(state, ASR) == 0  # nothing proved yet
    state, _ = run(state, ItemsArrivedTick((), drained=frozenset({ASR})))
    assert local_room(state, ASR) == 4
    state, _ = run(state, BacklogBehindTick(frozenset({ASR})))
    assert local_room(state, ASR) == 0
    state, _ = run(state, ItemsArrivedTick((), drained=frozenset({ASR})))
    busy, _ = run(state, ItemsArrivedTick(tuple(item(ASR, s) for s in (1, 2, 3))))
    assert local_room(busy, ASR) == 1
    full, _ = run(busy, ItemsArrivedTick((item(ASR, 4),)))
    assert local_room(full, ASR) == 0
    paused, _ = run(state, PauseTick("f"))
    assert local_room(paused, ASR) == 0
    # A paused flow's empty claims prove nothing: it stays behind until resumed.
    paused, _ = run(paused, ItemsArrivedTick((), drained=frozenset({ASR})))
    resumed, _ = run(paused, ResumeTick("f"))
    assert local_room(resumed, ASR) == 0


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


# -- pause, step, stop -------------------------------------------------------------


def test_pause_holds_items_and_step_starts_exactly_one_oldest_first() -> None:
    state, _ = run(fresh(), PauseTick("f"))
    state, commands = run(state, ItemsArrivedTick((item(REC, 2), item(ASR, 3), item(ASR, 4))))
    assert starts(commands) == []
    state, commands = run(state, StepTick("f"))
    assert starts(commands) == [("rec", 2, 1)]
    state, commands = run(state, StepTick("f"))
    assert starts(commands) == [("asr", 3, 1)]
    state, commands = run(state, NodeFinishedTick(ASR, "asr-3-1"))
    assert starts(commands) == []  # no step left
    state, commands = run(state, ResumeTick("f"))
    assert starts(commands) == [("asr", 4, 1)]
    assert events(commands) == ["flow_resumed"]


def test_sources_run_while_paused() -> None:
    state, _ = run(fresh(), PauseTick("f"))
    _, commands = run(state, ItemsArrivedTick((item(CAM, 1, kind="source"),)))
    assert starts(commands) == [("cam", 1, 1)]


def test_step_without_pause_does_nothing() -> None:
    assert run(fresh(), StepTick("f"))[1] == []


def test_stop_releases_waiting_items_and_starts_nothing_more() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1), item(ASR, 2), item(ASR, 3))))
    state, commands = run(state, StopTick())
    assert commands == [ReleaseCommand(("asr-2-1", "asr-3-1"))]
    state, commands = run(state, NodeFinishedTick(ASR, "asr-1-1"))
    assert commands == [AckCommand("asr-1-1")]
    assert is_idle(state) and wants(state) == {}
    _, commands = run(state, ItemsArrivedTick((item(ASR, 9),)))
    assert commands == [ReleaseCommand(("asr-9-1",))]


def test_failure_while_stopping_releases_instead_of_retrying() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1),)))
    state, _ = run(state, StopTick())
    _, commands = run(state, NodeFinishedTick(ASR, "asr-1-1", error="cancelled"))
    assert commands == [ReleaseCommand(("asr-1-1",), started=True)]


def test_a_resumed_run_drains_carefully_one_item_at_a_time() -> None:
    state = initial_state(LIMITS, [CAM, ASR], [CAM], resumed=True)
    assert state.careful == frozenset({ASR})
    assert wants(state) == {CAM: 1, ASR: 1}
    state, _ = run(state, ItemsArrivedTick((item(ASR, 1, deliveries=2),)))
    assert wants(state) == {CAM: 1}  # the line holds only the running item
    state, _ = run(state, NodeFinishedTick(ASR, "asr-1-2"))
    state, _ = run(state, ItemsArrivedTick((), drained=frozenset({ASR})))
    assert state.careful == frozenset() and local_room(state, ASR) == LIMITS.node_buffer
