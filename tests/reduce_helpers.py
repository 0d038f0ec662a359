"""Building blocks of the reducer's table tests: streams, items, ticks, readers."""

from __future__ import annotations

from mediaflow.engine.commands import (
    AckCommand,
    ClaimCommand,
    Command,
    JournalCommand,
    PublishEventCommand,
    StartNodeCommand,
)
from mediaflow.engine.reduce import reduce
from mediaflow.engine.state import EngineState, Limits, initial_state
from mediaflow.engine.ticks import ClaimDueTick, CommitDueTick, NodeFinishedTick, Tick
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


def fresh(limits: Limits = LIMITS, *, resumed: bool = False) -> EngineState:
    return initial_state(limits, [CAM, ASR, REC], [CAM], resumed=resumed)


def finished(stream: StreamKey, head: str, *, done: int, error: str | None = None) -> Tick:
    return NodeFinishedTick(stream, head, done, error)


Started = tuple[str, tuple[int, ...], int]
"""A StartNodeCommand as the tables write it: node, seqs of the batch, attempt."""


def starts(commands: list[Command]) -> list[Started]:
    """(node, seqs of the batch, attempt of its head) per StartNodeCommand."""
    return [
        (c.stream.node, tuple(i.seq for i in c.items), c.attempt)
        for c in commands
        if isinstance(c, StartNodeCommand)
    ]


def acks(commands: list[Command]) -> list[tuple[str, ...]]:
    return [c.entry_ids for c in commands if isinstance(c, AckCommand)]


def events(commands: list[Command]) -> list[str]:
    return [c.event_type for c in commands if isinstance(c, PublishEventCommand)]


def run(state: EngineState, *ticks: Tick, now: float = 0.0) -> tuple[EngineState, list[Command]]:
    out: list[Command] = []
    for tick in ticks:
        state, commands = reduce(state, tick, now)
        out.extend(commands)
    return state, out


def claim_wants(state: EngineState, *, poll: bool = False) -> dict[StreamKey, int]:
    """What a claim asked now would want (the state that asked is discarded)."""
    _, commands = reduce(state, ClaimDueTick(poll), 0.0)
    return {s: n for c in commands if isinstance(c, ClaimCommand) for s, n in c.wants.items()}


def journal_claims(state: EngineState, counts: dict[StreamKey, int]) -> dict[StreamKey, int]:
    """How many of a group commit's new emissions would be claimed at enqueue."""
    _, commands = reduce(state, CommitDueTick(counts), 0.0)
    (journal,) = [c for c in commands if isinstance(c, JournalCommand)]
    return dict(journal.claims)
