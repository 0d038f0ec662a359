"""The scheduling reducer as tables: state and tick in, state and commands out.

Routing, ordering, batches, retries and dead letters here; admission, flow
control and the backlog in ``tests/test_reduce_control.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from mediaflow.engine.commands import (
    DeadLetterCommand,
    PublishEventCommand,
    ReleaseCommand,
    StartNodeCommand,
    WakeAtCommand,
)
from mediaflow.engine.reduce import reduce
from mediaflow.engine.state import backoff_s, held_ids
from mediaflow.engine.ticks import ItemsArrivedTick, NodeFinishedTick, TimerTick
from mediaflow.queue.contract import StreamKey, WorkItem
from tests.reduce_helpers import (
    ASR,
    CAM,
    LIMITS,
    REC,
    acks,
    events,
    finished,
    fresh,
    item,
    run,
    starts,
)

# -- routing and ordering -------------------------------------------------------

ROUTING_CASES = [
    # (arrivals, expected starts: node, seqs of the batch, attempt)
    pytest.param([item(ASR, 1)], [("asr", (1,), 1)], id="one item starts its node"),
    pytest.param(
        [item(ASR, 1), item(ASR, 2), item(ASR, 3)],
        [("asr", (1, 2, 3), 1)],
        id="a node runs one batch at a time, its items oldest first",
    ),
    pytest.param(
        [item(ASR, 3), item(ASR, 1), item(ASR, 2)],
        [("asr", (1, 2, 3), 1)],
        id="a batch is ordered by seq whatever the arrival order",
    ),
    pytest.param(
        [item(ASR, 1), item(REC, 1)],
        [("asr", (1,), 1), ("rec", (1,), 1)],
        id="independent nodes start together (fan-out readers)",
    ),
    pytest.param(
        [item(ASR, 5), item(ASR, 2, deliveries=2)],
        [("asr", (2,), 1)],
        id="a redelivered older item goes first, alone",
    ),
    pytest.param(
        [item(CAM, 1, kind="source")], [("cam", (1,), 1)], id="a source item starts the source"
    ),
]


@pytest.mark.parametrize(("arrivals", "expected"), ROUTING_CASES)
def test_routing(
    arrivals: list[WorkItem], expected: list[tuple[str, tuple[int, ...], int]]
) -> None:
    _, commands = run(fresh(), ItemsArrivedTick(tuple(arrivals)))
    assert starts(commands) == expected


def test_items_arriving_while_a_batch_runs_wait_for_the_next_batch() -> None:
    state, commands = run(fresh(), ItemsArrivedTick((item(ASR, 1), item(ASR, 2))))
    assert starts(commands) == [("asr", (1, 2), 1)]
    state, commands = run(state, ItemsArrivedTick((item(ASR, 3), item(ASR, 4))))
    assert starts(commands) == []  # one batch at a time per node
    state, commands = run(state, finished(ASR, "asr-1-1", done=2))
    assert acks(commands) == [("asr-1-1", "asr-2-1")]
    assert starts(commands) == [("asr", (3, 4), 1)]


def test_ordering_per_edge_across_partial_batches() -> None:
    # A batch that ends early (the node yielded its turn) leaves its rest at the
    # head of the line: started again at once, in order, before anything newer.
    state, commands = run(fresh(), ItemsArrivedTick(tuple(item(ASR, s) for s in (1, 2, 3, 4))))
    seen = starts(commands)
    state, _ = run(state, ItemsArrivedTick((item(ASR, 5),)))
    acked: list[str] = []
    for head, done in (("asr-1-1", 1), ("asr-2-1", 2), ("asr-4-1", 1), ("asr-5-1", 1)):
        state, commands = run(state, finished(ASR, head, done=done))
        acked += [i for ids in acks(commands) for i in ids]
        seen += starts(commands)
    assert seen == [
        ("asr", (1, 2, 3, 4), 1),
        ("asr", (2, 3, 4, 5), 1),
        ("asr", (4, 5), 1),
        ("asr", (5,), 1),
    ]
    assert acked == [f"asr-{s}-1" for s in (1, 2, 3, 4, 5)]
    assert held_ids(state) == []


def test_redelivered_item_overtakes_younger_waiting_items() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 4),)))
    state, _ = run(state, ItemsArrivedTick((item(ASR, 6),)))
    state, _ = run(state, ItemsArrivedTick((item(ASR, 5, deliveries=2),)))
    state, commands = run(state, finished(ASR, "asr-4-1", done=1))
    (start,) = [c for c in commands if isinstance(c, StartNodeCommand)]
    assert [i.seq for i in start.items] == [5] and start.commit_first
    state, commands = run(state, finished(ASR, "asr-5-2", done=1))
    assert starts(commands) == [("asr", (6,), 1)]


def test_a_batch_stops_before_a_redelivery() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(REC, 9),)))  # REC busy, ASR idle
    arrivals = (item(ASR, 1), item(ASR, 2), item(ASR, 3, deliveries=2), item(ASR, 4))
    _, commands = run(state, ItemsArrivedTick(arrivals))
    assert starts(commands) == [("asr", (1, 2), 1)]


def test_duplicate_arrival_of_a_held_item_is_ignored() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1), item(ASR, 2))))
    # Our lease lapsed, the item was reclaimed and claimed by us again.
    again = replace(item(ASR, 2), deliveries=2)
    state, commands = run(state, ItemsArrivedTick((again,)))
    assert commands == []
    assert held_ids(state) == ["asr-1-1", "asr-2-1"]


@pytest.mark.parametrize(
    "tick",
    [
        pytest.param(NodeFinishedTick(ASR, "nope", 1), id="another batch's head"),
        pytest.param(NodeFinishedTick(REC, "rec-1-1", 1), id="a node with nothing running"),
        pytest.param(NodeFinishedTick(StreamKey("f", "gone"), "x", 1), id="an unknown node"),
    ],
)
def test_finish_for_a_batch_not_running_is_ignored(tick: NodeFinishedTick) -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1),)))
    assert run(state, tick)[1] == []


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
    state, commands = run(state, finished(ASR, "asr-1-1", done=0, error="boom"), now=10.0)
    assert starts(commands) == []  # seq 2 must not overtake the failed seq 1
    assert WakeAtCommand(11.0) in commands
    assert events(commands) == ["cascade_retry"]
    state, commands = run(state, TimerTick(), now=10.5)
    assert starts(commands) == []  # backoff not over
    state, commands = run(state, TimerTick(), now=11.0)
    assert starts(commands) == [("asr", (1,), 2)]  # a retry runs alone
    state, commands = run(state, finished(ASR, "asr-1-1", done=1), now=11.2)
    assert acks(commands) == [("asr-1-1",)]
    assert starts(commands) == [("asr", (2,), 1)]


def test_a_timer_that_fires_early_is_set_again() -> None:
    # uvloop and asyncio may run a timer up to their clock's resolution early: the
    # tick then finds the backoff not over, and must leave a timer behind.
    state, _ = run(fresh(), ItemsArrivedTick((item(CAM, 1, kind="source"),)), now=10.0)
    state, commands = run(state, finished(CAM, "cam-1-1", done=0, error="fell off"), now=10.0)
    assert WakeAtCommand(11.0) in commands
    state, commands = run(state, TimerTick(), now=10.9995)
    assert starts(commands) == [] and commands == [WakeAtCommand(11.0)]
    state, commands = run(state, TimerTick(), now=11.0)
    assert starts(commands) == [("cam", (1,), 2)]
    assert not any(isinstance(c, WakeAtCommand) for c in commands)


def test_a_failure_mid_batch_acks_what_went_before_and_retries_the_item() -> None:
    state, _ = run(fresh(), ItemsArrivedTick(tuple(item(ASR, s) for s in (1, 2, 3, 4))), now=5.0)
    state, commands = run(state, finished(ASR, "asr-1-1", done=2, error="boom"), now=5.0)
    assert acks(commands) == [("asr-1-1", "asr-2-1")]
    (retry,) = [c for c in commands if isinstance(c, PublishEventCommand)]
    assert retry.event_type == "cascade_retry"
    assert retry.data["seq"] == 3 and retry.data["attempt"] == 1  # its first run failed
    assert starts(commands) == [] and WakeAtCommand(6.0) in commands
    state, commands = run(state, TimerTick(), now=6.0)
    assert starts(commands) == [("asr", (3,), 2)]
    _, commands = run(state, finished(ASR, "asr-3-1", done=1), now=6.1)
    assert starts(commands) == [("asr", (4,), 1)]


def test_dead_letter_after_max_attempts_then_next_item_runs() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1), item(ASR, 2))))
    now = 0.0
    for _attempt in range(LIMITS.max_attempts - 1):
        state, _ = run(state, finished(ASR, "asr-1-1", done=0, error="boom"), now=now)
        now += 100
        state, _ = run(state, TimerTick(), now=now)
    state, commands = run(state, finished(ASR, "asr-1-1", done=0, error="boom"), now=now)
    dead = [c for c in commands if isinstance(c, DeadLetterCommand)]
    assert [d.item.seq for d in dead] == [1] and dead[0].reason == "boom"
    assert events(commands) == ["cascade_dropped"]
    assert starts(commands) == [("asr", (2,), 1)]


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


def test_a_source_is_never_dead_lettered_for_its_deliveries() -> None:
    _, commands = run(fresh(), ItemsArrivedTick((item(CAM, 1, deliveries=9, kind="source"),)))
    assert starts(commands) == [("cam", (1,), 1)]


def test_item_for_an_unknown_node_is_dead_lettered() -> None:
    stray = item(StreamKey("f", "gone"), 1)
    _, commands = run(fresh(), ItemsArrivedTick((stray,)))
    assert isinstance(commands[0], DeadLetterCommand) and "gone" in commands[0].reason


def test_an_arrival_while_stopping_is_released_unstarted() -> None:
    from mediaflow.engine.ticks import StopTick

    state, _ = run(fresh(), StopTick())
    _, commands = run(state, ItemsArrivedTick((item(ASR, 9), item(REC, 3))))
    assert commands == [ReleaseCommand(("asr-9-1", "rec-3-1"))]


def test_same_ticks_same_commands() -> None:
    ticks = [
        ItemsArrivedTick((item(REC, 2), item(ASR, 3), item(ASR, 4))),
        finished(ASR, "asr-3-1", done=1, error="x"),
        TimerTick(),
        finished(ASR, "asr-3-1", done=1),
        finished(REC, "rec-2-1", done=1),
    ]
    assert run(fresh(), *ticks, now=50.0) == run(fresh(), *ticks, now=50.0)
    assert reduce(fresh(), ticks[0], 0.0) == reduce(fresh(), ticks[0], 0.0)
