"""The trace codec is derived from the tick dataclasses: every tick type is written
and read back without code of its own in ``engine.trace``, in the format traces
have always had on disk (the lines below are that format, written out by hand)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, get_args

import pytest

from mediaflow.engine import trace
from mediaflow.engine.ticks import (
    CONTROL_ACTIONS,
    BacklogBehindTick,
    BacklogSampledTick,
    ClaimDueTick,
    ClaimedTick,
    ClaimFailedTick,
    CommitDueTick,
    CommitFailedTick,
    CommittedTick,
    ControlTick,
    HaltTick,
    ItemsArrivedTick,
    LeasedTick,
    LeaseDueTick,
    NodeFinishedTick,
    ReshapeTick,
    StopTick,
    Tick,
    TimerTick,
)
from mediaflow.queue.contract import StreamKey, WorkItem

A, B = StreamKey("f", "a"), StreamKey("f", "b")
ITEM = WorkItem("1-1", A, "emission", {"port": "x", "value": 1}, 3, 1, 12.5)
RAW_ITEM = {
    "id": "1-1",
    "stream": ["f", "a"],
    "kind": "emission",
    "payload": {"port": "x", "value": 1},
    "seq": 3,
    "deliveries": 1,
    "enqueued_at": 12.5,
}

WRITTEN: list[tuple[Tick, str]] = [
    (ClaimDueTick(), '{"type":"claim_due","poll":false}'),
    (ClaimDueTick(True), '{"type":"claim_due","poll":true}'),
    (ClaimedTick((ITEM,)), json.dumps({"type": "claimed", "items": [RAW_ITEM]})),
    (ClaimFailedTick(), '{"type":"claim_failed"}'),
    (CommitDueTick({B: 2, A: 1}), '{"type":"commit_due","counts":[["f","b",2],["f","a",1]]}'),
    (CommittedTick((ITEM,)), json.dumps({"type": "committed", "items": [RAW_ITEM]})),
    (CommitFailedTick(), '{"type":"commit_failed"}'),
    (ItemsArrivedTick(()), '{"type":"items_arrived","items":[]}'),
    (
        BacklogBehindTick(frozenset({B, A})),
        '{"type":"backlog_behind","streams":[["f","a"],["f","b"]]}',
    ),
    (
        NodeFinishedTick(A, "1-1", 0, "boom"),
        '{"type":"node_finished","stream":["f","a"],"id":"1-1","done":0,"error":"boom"}',
    ),
    (
        NodeFinishedTick(A, "1-1", 3),
        '{"type":"node_finished","stream":["f","a"],"id":"1-1","done":3}',
    ),
    (TimerTick(), '{"type":"timer"}'),
    (BacklogSampledTick({"f": 3}), '{"type":"backlog_sampled","per_flow":{"f":3}}'),
    *((ControlTick("f", a), f'{{"type":"{a}","flow":"f"}}') for a in CONTROL_ACTIONS),
    (HaltTick(frozenset({A})), '{"type":"halt","streams":[["f","a"]]}'),
    (
        ReshapeTick((B, A), frozenset({A}), frozenset({B}), frozenset(), {B: 0.5}),
        '{"type":"reshape","streams":[["f","b"],["f","a"]],"sources":[["f","a"]],'
        '"ordered":[["f","b"]],"rebuilt":[],"rates":[["f","b",0.5]]}',
    ),
    (
        LeaseDueTick(frozenset({A}), frozenset({B}), 0, 2),
        '{"type":"lease_due","mine":[["f","a"]],"others":[["f","b"]],"rank":0,"members":2}',
    ),
    (LeasedTick(frozenset({A})), '{"type":"leased","mine":[["f","a"]],"taken_over":[]}'),
    (StopTick(), '{"type":"stop"}'),
]


@pytest.mark.parametrize(("tick", "line"), WRITTEN, ids=lambda v: getattr(v, "type", ""))
def test_a_tick_is_written_as_traces_always_were_and_read_back(tick: Tick, line: str) -> None:
    encoded = trace.encode_tick(tick)
    assert encoded == json.loads(line)
    assert list(encoded) == list(json.loads(line))  # the keys in the same order
    assert trace.decode_tick(json.loads(json.dumps(encoded))) == tick


def test_every_tick_type_has_a_codec() -> None:
    written = {type(tick) for tick, _ in WRITTEN}
    assert written == set(get_args(Tick))


def test_a_tick_field_of_a_type_no_trace_holds_fails_at_once() -> None:
    @dataclass(frozen=True)
    class OddTick:
        when: complex
        type: Literal["odd"] = "odd"

    with pytest.raises(TypeError, match="cannot hold"):
        trace._tick_codec(OddTick)  # type: ignore[arg-type]


def test_an_unknown_tick_type_is_a_trace_error() -> None:
    with pytest.raises(trace.TraceError, match="unknown tick type"):
        trace.decode_tick({"type": "nope"})
