"""Random interleavings of ``commit`` (of runs or of single items), ``claim``, ``ack``, ``release``
and parking, against every backend in ``QUEUE_BACKENDS``, checked step by step
against a model of each stream.

Every value appended to a stream carries its place in the stream (``k``: 1 for
the stream's first item, 2 for the next, ...), so each item the queue hands
back must have ``seq == k``: per-stream order and no gaps, whichever call
appended it. The model also says exactly which new items a call claims at
once (never one behind a ready item of its stream, never in a parked flow),
which items a claim returns (the oldest ready ones), and what the counters
and backlog read. A final drain sees every item once.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mediaflow.queue import EmissionRun, NewItem, StreamKey, WorkItem, WorkQueue
from tests.conftest import QUEUE_BACKENDS, _queue_opener

STREAMS = [StreamKey("f1", "a"), StreamKey("f1", "b"), StreamKey("f2", "c")]
FLOWS = ["f1", "f2"]
CONSUMERS = [None, "c1", "c2"]

stream_i = st.integers(0, len(STREAMS) - 1)
consumer = st.sampled_from(CONSUMERS)
picks = st.lists(st.integers(0, 1000), max_size=6)  # items among the known ones, modulo

commit_op = st.tuples(
    st.just("commit"),
    # per run: stream, how many values, how many of them to claim (clamped to the run)
    st.lists(st.tuples(stream_i, st.integers(0, 4), st.integers(0, 4)), max_size=4),
    consumer,
    picks,
)
items_op = st.tuples(
    st.just("items"), st.lists(st.tuples(stream_i, st.booleans()), max_size=4), consumer, picks
)
claim_op = st.tuples(
    st.just("claim"), st.sampled_from(CONSUMERS[1:]), st.lists(st.integers(0, 3), min_size=3)
)
ack_op = st.tuples(st.just("ack"), picks)
release_op = st.tuples(st.just("release"), picks)
park_op = st.tuples(st.just("park"), st.sampled_from(FLOWS), st.booleans())
operations = st.lists(
    st.one_of(commit_op, items_op, claim_op, ack_op, release_op, park_op), max_size=25
)


@dataclass
class Model:
    appended: dict[StreamKey, int] = field(default_factory=lambda: dict.fromkeys(STREAMS, 0))
    ready: dict[StreamKey, set[int]] = field(default_factory=lambda: {s: set() for s in STREAMS})
    pending: dict[str, tuple[StreamKey, int]] = field(default_factory=dict)  # entry id -> place
    deliveries: dict[tuple[StreamKey, int], int] = field(default_factory=dict)
    seen: dict[tuple[StreamKey, int], str] = field(default_factory=dict)  # place -> entry id
    parked: set[str] = field(default_factory=set)
    acked: int = 0

    def blocked(self) -> set[StreamKey]:
        """Streams whose new items may not be claimed at once now."""
        return {s for s in STREAMS if self.ready[s] or s.flow in self.parked}

    def append(self, stream: StreamKey) -> int:
        self.appended[stream] += 1
        return self.appended[stream]

    def picked(self, picks: Sequence[int]) -> list[str]:
        """Entry ids: known ones (pending or not) by index, and one that is no id."""
        known = sorted(self.seen.values())
        chosen = [known[p % len(known)] for p in picks] if known else []
        return [*chosen, "nope"] if picks else chosen

    def observe(self, item: WorkItem, deliveries: int) -> None:
        """An item handed out (claimed): check its place, remember it."""
        payload = item.payload
        k = payload["value"]["k"] if "value" in payload else payload["k"]
        assert item.seq == k, f"{item.stream} seq {item.seq} carries the value appended {k}th"
        place = (item.stream, item.seq)
        assert self.seen.setdefault(place, item.entry_id) == item.entry_id
        assert item.deliveries == deliveries
        self.deliveries[place] = deliveries
        self.pending[item.entry_id] = place

    def ack(self, entry_ids: Sequence[str]) -> int:
        done = {e for e in entry_ids if e in self.pending}
        for entry_id in done:
            del self.pending[entry_id]
        self.acked += len(done)
        return len(done)


async def step(queue: WorkQueue, model: Model, op: tuple[Any, ...]) -> None:
    match op:
        case ("commit", runs, claim_for, ack_picks):
            acks = model.picked(ack_picks)
            blocked = model.blocked()
            emission_runs, expected = [], []
            for index, count, claim in runs:
                stream = STREAMS[index]
                ks = [model.append(stream) for _ in range(count)]
                take = min(claim, count)
                emission_runs.append(
                    EmissionRun(stream, "up.out", "in", [{"k": k} for k in ks], 0.5, take)
                )
                claimed = take if claim_for is not None and stream not in blocked else 0
                expected += [(stream, k) for k in ks[:claimed]]
                model.ready[stream].update(ks[claimed:])
                if claimed < count:
                    blocked.add(stream)
            got = await queue.commit(emission_runs, claim_for=claim_for, ack=acks)
            model.ack(acks)
            assert [(i.stream, i.seq) for i in got] == expected
            for item in got:
                model.observe(item, 1)
        case ("items", items, claim_for, ack_picks):
            acks = model.picked(ack_picks)
            blocked = model.blocked()
            new, expected_deliveries = [], []
            for index, claim in items:
                stream = STREAMS[index]
                k = model.append(stream)
                new.append(NewItem(stream, "emission", {"k": k}, claim=claim))
                claimed = claim_for is not None and claim and stream not in blocked
                expected_deliveries.append(1 if claimed else 0)
                if not claimed:
                    model.ready[stream].add(k)
                    blocked.add(stream)
            stored = await queue.commit(new, claim_for=claim_for, ack=acks)
            model.ack(acks)
            assert [i.deliveries for i in stored] == expected_deliveries
            for item, deliveries in zip(stored, expected_deliveries, strict=True):
                assert item.seq == item.payload["k"]
                if deliveries:
                    model.observe(item, 1)
                else:  # ready: its id is known, and acking it must not count
                    model.seen[item.stream, item.seq] = item.entry_id
        case ("claim", name, wants):
            plan = dict(zip(STREAMS, wants, strict=False))
            got = await queue.claim(name, plan)
            for stream, n in plan.items():
                mine = [i for i in got if i.stream == stream]
                ready = sorted(model.ready[stream])
                expected = [] if stream.flow in model.parked else ready[:n]
                assert [i.seq for i in mine] == expected
                for item in mine:
                    model.ready[stream].discard(item.seq)
                    model.observe(item, model.deliveries.get((stream, item.seq), 0) + 1)
        case ("ack", ack_picks):
            acks = model.picked(ack_picks)
            assert await queue.ack(acks) == model.ack(acks)
        case ("release", release_picks):
            chosen = model.picked(release_picks)
            held = {e: model.pending.pop(e) for e in set(chosen) if e in model.pending}
            for stream, seq in held.values():
                model.ready[stream].add(seq)
            assert await queue.release(chosen) == len(held)
        case ("park", flow, park):
            if park:
                await queue.park(flow)
                model.parked.add(flow)
            else:
                await queue.unpark(flow)
                model.parked.discard(flow)
        case _:
            raise AssertionError(f"unknown operation {op!r}")


async def check(queue: WorkQueue, model: Model) -> None:
    stats = await queue.stats()
    assert (stats.enqueued, stats.acked) == (sum(model.appended.values()), model.acked)
    backlog = await queue.backlog()
    for stream in STREAMS:
        waiting = backlog.get(stream)
        pending = sum(1 for s, _ in model.pending.values() if s == stream)
        got = (waiting.ready, waiting.pending) if waiting else (0, 0)
        assert got == (len(model.ready[stream]), pending), stream


async def scenario(queue: WorkQueue, ops: list[tuple[Any, ...]]) -> None:
    model = Model()
    try:
        for op in ops:
            await step(queue, model, op)
            await check(queue, model)
        for flow in FLOWS:
            await step(queue, model, ("park", flow, False))
        await step(queue, model, ("claim", "drain", [1000] * len(STREAMS)))
        for stream in STREAMS:
            seqs = sorted(seq for s, seq in model.seen if s == stream)
            assert seqs == list(range(1, model.appended[stream] + 1)), stream
    finally:
        await queue.close()


@pytest.mark.parametrize("backend", QUEUE_BACKENDS)
@settings(
    max_examples=80,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=operations)
def test_interleavings_keep_each_stream_in_order_without_gaps(
    backend: str, ops: list[tuple[Any, ...]]
) -> None:
    with tempfile.TemporaryDirectory(prefix="queue-props-") as place:
        queue = _queue_opener(backend, Path(place))()
        asyncio.run(scenario(queue, ops))
