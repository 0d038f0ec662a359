"""The reducer's lease rules (``mediaflow.engine.leasing``) as tables: which
ordered streams an executor takes, keeps, hands over and claims from.

Streams: ``CAM`` (a source: never leased), ``ASR`` and ``REC`` (ordered), plus
``X`` and ``Y`` for the four-stream shares.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mediaflow.engine.commands import Command, LeaseCommand, RecallCommand
from mediaflow.engine.lease_round import LeaseRound
from mediaflow.engine.leasing import fair_share
from mediaflow.engine.state import EngineState, initial_state, is_settled, may_claim
from mediaflow.engine.ticks import (
    ClaimDueTick,
    ClaimedTick,
    CommitDueTick,
    LeasedTick,
    LeaseDueTick,
    StopTick,
    Tick,
)
from mediaflow.queue.contract import LeaseTable, StreamKey
from tests.reduce_helpers import (
    ASR,
    CAM,
    LIMITS,
    REC,
    acks,
    claim_wants,
    item,
    journal_claims,
    run,
    starts,
)
from tests.reduce_helpers import finished as node_finished

X = StreamKey("f", "x")
Y = StreamKey("f", "y")
ORDERED = (ASR, REC, X, Y)
ORDERED_SORTED = tuple(sorted(ORDERED))


def leasing() -> EngineState:
    return initial_state(LIMITS, [CAM, *ORDERED], [CAM], ordered=[CAM, *ORDERED])


def lease_command(commands: list[Command]) -> LeaseCommand:
    (command,) = [c for c in commands if isinstance(c, LeaseCommand)]
    return command


def due(
    mine: frozenset[StreamKey] = frozenset(),
    others: frozenset[StreamKey] = frozenset(),
    rank: int = 0,
    members: int = 1,
) -> LeaseDueTick:
    return LeaseDueTick(mine, others, rank, members)


@pytest.mark.parametrize(
    ("streams", "members", "shares"),
    [
        (4, 1, [4]),
        (4, 2, [2, 2]),
        (4, 3, [2, 1, 1]),
        (1, 2, [1, 0]),
        (0, 3, [0, 0, 0]),
        (5, 4, [2, 1, 1, 1]),
    ],
)
def test_fair_shares_add_up_to_every_stream(streams: int, members: int, shares: list[int]) -> None:
    assert [fair_share(streams, members, r) for r in range(members)] == shares
    assert sum(shares) == streams


def test_sources_are_never_leased_and_unleased_ordered_streams_are_not_claimed() -> None:
    state = leasing()
    assert state.ordered == frozenset(ORDERED)
    assert may_claim(state, CAM)
    assert not any(may_claim(state, s) for s in ORDERED)
    assert set(claim_wants(state)) == {CAM}
    # The source's claim came back short: settled, whatever other executors hold.
    state, _ = run(state, ClaimDueTick(), ClaimedTick(()))
    assert is_settled(state)


def test_a_lone_executor_asks_for_every_free_stream_and_claims_what_it_got() -> None:
    state, commands = run(leasing(), due())
    assert lease_command(commands) == LeaseCommand((), ORDERED_SORTED, ())
    state, commands = run(state, LeasedTick(frozenset({ASR, REC})))
    assert state.leased == {ASR, REC}
    assert set(claim_wants(state)) == {CAM, ASR, REC}


def test_an_executor_takes_only_free_streams_up_to_its_share() -> None:
    _, commands = run(leasing(), due(others=frozenset({ASR}), rank=1, members=3))
    # 4 streams, 3 members: rank 1 aims at one; ASR is someone else's.
    assert lease_command(commands).acquire == (REC,)


def test_excess_streams_drain_emptiest_first_and_go_once_empty() -> None:
    state, _ = run(leasing(), due(), LeasedTick(frozenset(ORDERED)))
    # ASR and REC have work in memory; X and Y are empty.
    state, _ = run(state, ClaimedTick((item(ASR, 1), item(ASR, 2), item(REC, 1))))
    state, commands = run(state, due(mine=frozenset(ORDERED), rank=0, members=2))
    command = lease_command(commands)
    assert command.release == (X, Y)  # the emptiest go, at once: nothing of theirs in memory
    assert command.hold == (ASR, REC)
    assert state.leased == {ASR, REC}
    assert state.draining == frozenset()


def test_a_busy_stream_is_handed_over_only_after_its_line_empties() -> None:
    state, _ = run(leasing(), due(), LeasedTick(frozenset(ORDERED)))
    state, _ = run(state, ClaimedTick(tuple(item(s, 1) for s in ORDERED)))
    state, commands = run(state, due(mine=frozenset(ORDERED), rank=1, members=2))
    assert lease_command(commands).release == ()
    assert len(state.draining) == 2
    draining = sorted(state.draining)
    # Draining: no more claims, no claims at enqueue.
    assert not any(may_claim(state, s) for s in draining)
    assert set(journal_claims(state, dict.fromkeys(draining, 1))) == set()
    # Their lines empty (the node finished its item): released at the next round.
    for stream in draining:
        state, _ = run(state, finished(stream))
    state, commands = run(state, due(mine=frozenset(ORDERED), rank=1, members=2))
    assert lease_command(commands).release == tuple(draining)
    assert state.leased == frozenset(ORDERED) - set(draining)


def test_a_stream_asked_of_the_queue_or_promised_to_a_commit_is_not_released() -> None:
    state, _ = run(leasing(), due(), LeasedTick(frozenset({ASR, REC})))
    state, _ = run(state, ClaimDueTick(), ClaimedTick(()))  # a short claim: caught up
    state, _ = run(state, CommitDueTick({ASR: 2}))  # ASR's room is promised; share 0 below
    state, commands = run(
        state, due(mine=frozenset({ASR, REC}), others=frozenset({X, Y}), rank=4, members=5)
    )
    assert lease_command(commands).release == (REC,)
    assert ASR in state.draining


def test_lost_leases_stop_claims_and_taken_over_streams_drain_carefully() -> None:
    state, _ = run(leasing(), due(), LeasedTick(frozenset({ASR, REC})))
    state, commands = run(state, LeasedTick(frozenset({REC, X}), taken_over=frozenset({X})))
    assert commands  # the claimer is woken for X
    assert state.leased == {REC, X}
    assert X in state.careful and X not in state.caught_up
    assert not may_claim(state, ASR)


def test_stopping_renews_what_is_held_and_takes_nothing() -> None:
    state, _ = run(leasing(), due(), LeasedTick(frozenset({ASR})), StopTick())
    _, commands = run(state, due(mine=frozenset({ASR})))
    assert lease_command(commands) == LeaseCommand((ASR,), (), ())


def finished(stream: StreamKey) -> Tick:
    """The node of ``stream`` finished its item seq 1."""
    return node_finished(stream, f"{stream.node}-1-1", done=1)


def test_a_lost_lease_ends_the_batch_and_starts_nothing_more_of_its_stream() -> None:
    """A lease that lapsed (the queue was away, or the event loop stalled) may be
    another executor's now: the batch running stops after its item, the rest and
    anything claimed for the stream just before are dropped (the new holder gets
    them from the queue), so no item runs in two processes at once."""
    state, _ = run(leasing(), due(), LeasedTick(frozenset({ASR, REC})))
    batch = tuple(item(ASR, seq) for seq in range(4))
    state, commands = run(state, ClaimDueTick(), ClaimedTick(batch))
    assert starts(commands) == [("asr", (0, 1, 2, 3), 1)]
    state, commands = run(state, LeasedTick(frozenset({REC})))
    assert RecallCommand(ASR) in commands
    state, commands = run(state, node_finished(ASR, "asr-0-1", done=1))
    assert acks(commands) == [("asr-0-1",)] and starts(commands) == []
    state, commands = run(state, ClaimedTick((item(ASR, 4),)))
    assert starts(commands) == [] and state.nodes[ASR].held == 0
    assert not may_claim(state, ASR)


class SlowLeases:
    """A queue whose first lease call grants ASR and whose later ones wait ``stall_s``
    (a queue cut off), then grant it again."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self.calls: list[tuple[tuple[StreamKey, ...], tuple[StreamKey, ...]]] = []

    async def lease(self, flow: str, consumer: str, **kw: Any) -> LeaseTable:
        self.calls.append((tuple(kw.get("hold", ())), tuple(kw.get("acquire", ()))))
        if len(self.calls) > 1:
            await asyncio.sleep(self.stall_s)
        return LeaseTable({ASR: consumer}, (consumer,))


async def test_leases_no_round_renewed_in_time_are_given_up_and_taken_afresh() -> None:
    """The lease round gives its leases up when ``ttl_ms`` passes without a renewal,
    even with a call still on its way; that call's answer is not taken as a
    renewal: the next round takes the stream again (``acquire``), which hands the
    items dropped from memory back."""
    queue = SlowLeases(stall_s=0.3)
    ticks: list[Tick] = []

    def dispatch(tick: Tick) -> list[Command]:
        ticks.append(tick)
        if isinstance(tick, LeaseDueTick):
            held = tuple(sorted(tick.mine))
            return [LeaseCommand(held, () if held else (ASR,), ())]
        return []

    async def commit() -> None:
        return None

    leases = LeaseRound(
        queue=queue,  # type: ignore[arg-type]
        flow="f",
        consumer="me",
        ttl_ms=100,
        dispatch=dispatch,
        commit=commit,
    )
    await leases.run()
    assert ticks[-1] == LeasedTick(frozenset({ASR}))
    await leases.run()  # stalls past the ttl: given up meanwhile, its answer ignored
    assert ticks[-1] == LeasedTick(frozenset())
    assert leases.table.held_by("me") == frozenset()
    await leases.run()
    assert queue.calls == [((), (ASR,)), ((ASR,), ()), ((), (ASR,))]
    await leases.leave()
