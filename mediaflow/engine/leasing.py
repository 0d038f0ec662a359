"""Leases: which executor of a flow runs each ordered stream, decided by the reducer.

Every executor of a flow (``mediaflow run`` and each ``mediaflow worker``)
runs the same rules against the same table, so they agree without talking:

* **one holder per stream**: a node whose class is ``ordered`` (the default)
  has its stream claimed only under a lease, so its items run in order on one
  process however many executors claim. Sources and unordered nodes need none;
* **a fair share each**: with ``n`` ordered streams and ``m`` live members,
  the member ranked ``r`` (by name) aims at ``n // m`` streams, one more if
  ``r < n % m``. It takes free streams up to its share and hands over the
  rest: no new work for them, and the lease goes once the line is empty (never
  with work of the stream in memory, so nothing runs twice on a handover);
* **a dead holder's streams move**: its leases lapse after ``lease_ms``; whoever
  takes one gets the items it held back first (``taken_over``) and drains them
  carefully, one at a time, as after a crash.

Pure like :mod:`.reduce`: ticks in, state and commands out.
"""

from __future__ import annotations

from dataclasses import replace

from mediaflow.engine.commands import Command, LeaseCommand, RecallCommand, WakeClaimerCommand
from mediaflow.engine.state import EngineState, with_streams
from mediaflow.engine.ticks import LeasedTick, LeaseDueTick
from mediaflow.queue.contract import StreamKey

Result = tuple[EngineState, list[Command]]


def fair_share(streams: int, members: int, rank: int) -> int:
    """How many of ``streams`` the member ranked ``rank`` of ``members`` holds."""
    members = max(members, rank + 1, 1)
    return streams // members + (1 if rank < streams % members else 0)


def on_lease_due(state: EngineState, tick: LeaseDueTick) -> Result:
    """Renew what is held, take free streams up to the fair share, hand over
    the excess (emptiest lines first) and release what has drained."""
    lost = state.leased - tick.mine
    leased = state.leased - lost
    if state.stopping:
        return _settle(state, leased, frozenset(), lost), [LeaseCommand(_sorted(leased))]
    share = fair_share(len(state.ordered), tick.members, tick.rank)
    draining = state.draining & leased
    keeping = leased - draining
    if len(keeping) > share:
        by_load = sorted(keeping, key=lambda s: (state.nodes[s].held, s))
        draining |= frozenset(by_load[: len(keeping) - share])
    elif len(keeping) < share and draining:
        draining -= frozenset(_sorted(draining)[: share - len(keeping)])
    release = frozenset(s for s in draining if _quiet(state, s))
    leased -= release
    draining -= release
    free = _sorted(state.ordered - tick.mine - tick.others)
    acquire = free[: max(0, share - len(leased - draining))]
    state = _settle(state, leased, draining, lost | release)
    return state, [LeaseCommand(_sorted(leased), acquire, _sorted(release))]


def on_leased(state: EngineState, tick: LeasedTick) -> Result:
    """The table after the lease call: new streams are claimed from disk (a
    taken-over one carefully), streams lost meanwhile are not claimed any more
    and their lines are dropped (:func:`_forget_lines`)."""
    mine = tick.mine & state.ordered
    new = mine - state.leased
    lost = state.leased - mine
    state = _settle(state, state.leased - lost | new, state.draining & mine, lost | new)
    commands: list[Command] = []
    if lost:
        state, commands = _forget_lines(state, lost)
    if not new:
        return state, commands
    return with_streams(state, tick.taken_over & new, careful=True), [
        *commands,
        WakeClaimerCommand(),
    ]


def _forget_lines(state: EngineState, lost: frozenset[StreamKey]) -> Result:
    """A lease lost while this process held work of the stream (it lapsed while
    the queue was unreachable, or the event loop stalled past ``lease_ms``): the
    new holder runs the stream now, so nothing waiting here may start, or one
    node's items would run twice, in two processes at once. The items are not
    released (a release could take them back from the new holder, which may hold
    them already): taking the lease over handed them back to the queue, or they
    go back once idle for ``lease_ms``, as a dead holder's do. A batch that runs
    stops after its current item."""
    nodes = dict(state.nodes)
    commands: list[Command] = []
    for stream in lost:
        node = nodes.get(stream)
        if node is None:
            continue
        if len(node.running) > 1 and not node.recalled:
            commands.append(RecallCommand(stream))
            node = replace(node, recalled=True)
        nodes[stream] = replace(node, waiting=(), retry_at=None)
    return replace(state, nodes=nodes), commands


def _settle(
    state: EngineState,
    leased: frozenset[StreamKey],
    draining: frozenset[StreamKey],
    unknown: frozenset[StreamKey],
) -> EngineState:
    # A stream gained or given up is not known to be caught up: whoever holds it
    # next claims from disk before taking new work at enqueue.
    nodes = dict(state.nodes)
    for stream, node in state.nodes.items():
        facts = (stream in leased, stream in draining, node.caught_up and stream not in unknown)
        if facts != (node.leased, node.draining, node.caught_up):
            nodes[stream] = replace(node, leased=facts[0], draining=facts[1], caught_up=facts[2])
    return replace(state, nodes=nodes)


def _quiet(state: EngineState, stream: StreamKey) -> bool:
    """Nothing of ``stream`` in memory, promised to a commit or asked of the queue."""
    claim = state.claim
    node = state.nodes[stream]
    return node.held == 0 and node.reserved == 0 and (claim is None or stream not in claim.asked)


def _sorted(streams: frozenset[StreamKey]) -> tuple[StreamKey, ...]:
    return tuple(sorted(streams))
