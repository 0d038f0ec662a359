"""A node's own retry policy and an item it refuses for good, decided by the reducer:
tables of ticks in, commands out (the engine-wide rules are in ``test_reduce.py``)."""

from __future__ import annotations

import json

import pytest

from mediaflow.engine import trace
from mediaflow.engine.commands import (
    Command,
    DeadLetterCommand,
    PublishEventCommand,
    WakeAtCommand,
)
from mediaflow.engine.control import on_reshape
from mediaflow.engine.state import EngineState, backoff_s, initial_state, retry_of
from mediaflow.engine.ticks import ItemsArrivedTick, NodeFinishedTick, ReshapeTick, TimerTick
from mediaflow.node import RetryPolicy
from tests.reduce_helpers import ASR, CAM, LIMITS, REC, events, finished, item, run, starts

# ASR retries by its own policy: 6 runs, from 0.5 s doubling to at most 3 s.
OWN = RetryPolicy(max_attempts=6, retry_base_s=0.5, retry_max_s=3.0)


def fresh_own() -> EngineState:
    return initial_state(LIMITS, [CAM, ASR, REC], [CAM], retries={ASR: OWN})


def fail_until_dropped(state: EngineState, head: str) -> tuple[list[float], list[Command]]:
    """Fail the head of ASR's line each time it runs; the delays asked for, and the
    commands of the failure that dead-lettered it."""
    now, delays = 0.0, list[float]()
    while True:
        state, commands = run(state, finished(ASR, head, done=0, error="HTTP 500"), now=now)
        wakes = [c.at for c in commands if isinstance(c, WakeAtCommand)]
        if not wakes:
            return delays, commands
        delays.append(round(wakes[0] - now, 6))
        now = wakes[0]
        state, _ = run(state, TimerTick(), now=now)


POLICY_BACKOFF = [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (5, 3.0), (2000, 3.0)]


@pytest.mark.parametrize(("attempt", "delay"), POLICY_BACKOFF)
def test_a_policy_backs_off_doubling_to_its_cap(attempt: int, delay: float) -> None:
    assert backoff_s(OWN, attempt) == delay


def test_a_node_with_its_own_policy_retries_by_it_and_dead_letters_after_its_attempts() -> None:
    state, _ = run(fresh_own(), ItemsArrivedTick((item(ASR, 1), item(ASR, 2))))
    delays, commands = fail_until_dropped(state, "asr-1-1")
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]  # 5 retries: 6 runs in all
    (dead,) = [c for c in commands if isinstance(c, DeadLetterCommand)]
    assert (dead.item.seq, dead.reason) == (1, "HTTP 500")
    dropped = next(c for c in commands if isinstance(c, PublishEventCommand))
    assert dropped.data["attempts"] == 6
    assert starts(commands) == [("asr", (2,), 1)]  # the next item goes on


def test_other_nodes_keep_the_engines_settings() -> None:
    state = fresh_own()
    assert retry_of(state.limits, state.nodes[REC]) == RetryPolicy(3, 1.0, 4.0)
    state, _ = run(state, ItemsArrivedTick((item(REC, 1),)))
    _, commands = run(state, finished(REC, "rec-1-1", done=0, error="boom"), now=0.0)
    assert WakeAtCommand(1.0) in commands  # LIMITS.retry_base_s


def test_a_refused_item_is_dead_lettered_at_once_and_the_next_runs() -> None:
    state, _ = run(fresh_own(), ItemsArrivedTick((item(ASR, 1), item(ASR, 2))))
    tick = NodeFinishedTick(ASR, "asr-1-1", 0, "ItemRefused: HTTP 404", refused=True)
    _, commands = run(state, tick, now=0.0)
    (dead,) = [c for c in commands if isinstance(c, DeadLetterCommand)]
    assert (dead.item.seq, dead.reason) == (1, "ItemRefused: HTTP 404")
    assert events(commands) == ["cascade_dropped"]  # no cascade_retry
    assert not any(isinstance(c, WakeAtCommand) for c in commands)
    assert starts(commands) == [("asr", (2,), 1)]


def test_a_reload_gives_a_stream_its_new_policy() -> None:
    state = fresh_own()
    newer = RetryPolicy(2, 0.1, 0.2)
    streams, sources = (CAM, ASR, REC), frozenset({CAM})
    tick = ReshapeTick(streams, sources, frozenset(), frozenset({ASR}), {}, {})
    reshaped, _ = on_reshape(state, tick)
    assert reshaped.nodes[ASR].retry is None  # the new node has none
    tick = ReshapeTick(streams, sources, frozenset(), frozenset(), {}, {REC: newer})
    reshaped, _ = on_reshape(state, tick)
    assert (reshaped.nodes[ASR].retry, reshaped.nodes[REC].retry) == (None, newer)


@pytest.mark.parametrize(
    ("tick", "line"),
    [
        (
            NodeFinishedTick(ASR, "1-1", 0, "no", refused=True),
            '{"type":"node_finished","stream":["f","asr"],"id":"1-1","done":0,"error":"no",'
            '"refused":true}',
        ),
        (
            ReshapeTick((ASR,), frozenset(), frozenset(), frozenset(), {}, {ASR: OWN}),
            '{"type":"reshape","streams":[["f","asr"]],"sources":[],"ordered":[],"rebuilt":[],'
            '"rates":[],"retries":[["f","asr",6,0.5,3.0]]}',
        ),
    ],
    ids=["refused", "retries"],
)
def test_the_new_fields_are_traced_and_read_back(tick: object, line: str) -> None:
    encoded = trace.encode_tick(tick)  # type: ignore[arg-type]
    assert encoded == json.loads(line)
    assert trace.decode_tick(json.loads(json.dumps(encoded))) == tick


def test_a_trace_header_keeps_the_policies() -> None:
    header = json.loads(json.dumps(trace.encode_start(fresh_own(), "run-1")))
    assert header["retries"] == [["f", "asr", 6, 0.5, 3.0]]
    assert trace.decode_start(header).nodes[ASR].retry == OWN


@pytest.mark.parametrize(
    ("values", "message"),
    [((0, 1.0, 2.0), "max_attempts"), ((3, 0.0, 2.0), "retry_base_s"), ((3, 5.0, 2.0), "retry")],
)
def test_a_policy_out_of_range_is_refused(values: tuple[int, float, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(*values)
