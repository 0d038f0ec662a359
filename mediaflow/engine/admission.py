"""Admission: how much work this process takes in, decided by the reducer.

Two questions, asked as ticks and answered with one command each:

* :func:`on_claim_due` (``ClaimDueTick`` -> ``ClaimCommand``): what to claim
  from disk, stream by stream, within the room of each node's bounded line;
* :func:`on_commit_due` (``CommitDueTick`` -> ``JournalCommand``): how many of
  a group commit's new emissions to claim in the commit itself, which is only
  allowed for a *caught-up* stream (nothing older on disk to overtake).

The room promised to a commit in flight is reserved until it lands, and a
claim remembers each stream's behind mark, so a claim that comes back short
proves a stream caught up only if nothing was left on disk meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from mediaflow.engine import control
from mediaflow.engine.commands import (
    ClaimCommand,
    Command,
    JournalCommand,
    WakeClaimerCommand,
)
from mediaflow.engine.state import ClaimInFlight, EngineState, may_claim, room
from mediaflow.queue.contract import StreamKey

Result = tuple[EngineState, list[Command]]


def on_claim_due(state: EngineState, poll: bool) -> Result:
    """How many more items each stream may claim from disk: room in its line.

    A caught-up stream receives its work at enqueue, so it is left out unless
    ``poll`` (looking for work other processes enqueued); so is a stream of an
    ordered node this process holds no lease on. Claims go in batches
    (each is a transaction): a busy node asks again only once a quarter of its
    line is free. A source stream holds at most its one long-lived item.
    Nothing is claimed once stopping, nor while a claim is in flight.
    """
    if state.stopping or state.claim is not None:
        return state, []
    low_water = max(1, state.limits.node_buffer // 4)
    asked: dict[StreamKey, tuple[int, int]] = {}
    for stream, node in state.nodes.items():
        if (node.caught_up and not poll) or not may_claim(state, stream):
            continue
        mark = node.behind_mark
        if node.is_source:
            if node.held == 0:
                asked[stream] = (1, mark)
            continue
        free = room(state, stream)
        if free >= low_water or (free > 0 and node.held == 0):
            asked[stream] = (free, mark)
    if not asked:
        return state, []
    wants = {stream: n for stream, (n, _mark) in asked.items()}
    return replace(state, claim=ClaimInFlight(asked)), [ClaimCommand(wants)]


def on_commit_due(state: EngineState, counts: Mapping[StreamKey, int]) -> Result:
    """How many of each stream's new emissions to claim in the commit itself: room
    in its line, but none if older work of the stream waits on disk (a new item
    would overtake it), its flow is paused, or we are stopping. What is left on
    disk makes the stream behind until the claimer fetches it in order."""
    claims: dict[StreamKey, int] = {}
    behind: set[StreamKey] = set()
    for stream, count in counts.items():
        n = min(count, _claimable_at_enqueue(state, stream))
        if n > 0:
            claims[stream] = n
        if n < count:
            behind.add(stream)
    state = replace(
        state,
        nodes={
            s: replace(node, reserved=claims.get(s, 0)) if node.reserved or s in claims else node
            for s, node in state.nodes.items()
        },
    )
    commands: list[Command] = [JournalCommand(claims)]
    if behind:
        state = control.mark_behind(state, frozenset(behind))
        commands.append(WakeClaimerCommand())
    return state, commands


def _claimable_at_enqueue(state: EngineState, stream: StreamKey) -> int:
    node = state.nodes.get(stream)
    if node is None or not node.caught_up or stream.flow in state.paused or state.stopping:
        return 0
    if not may_claim(state, stream):
        return 0
    return max(0, room(state, stream))
