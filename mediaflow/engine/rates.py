"""Rate limits (a node's ``max_rate``), decided by the reducer.

A rate-limited node starts at most once per window of ``1 / max_rate``
seconds. When it starts, the newest waiting item of each input port runs and
the older ones are coalesced away (acked unrun, reported as
``items_coalesced``); the next start waits for the window to end, and a timer
then starts whatever arrived meanwhile, so a window's last value always gets
out. Pure like :mod:`.reduce`.
"""

from __future__ import annotations

from dataclasses import replace

from mediaflow.engine.commands import AckCommand, Command, PublishEventCommand, WakeAtCommand
from mediaflow.engine.state import StreamState
from mediaflow.queue.contract import StreamKey, WorkItem


def open_window(
    stream: StreamKey, node: StreamState, now: float, commands: list[Command]
) -> StreamState:
    """Coalesce ``node``'s line for a start now, and gate it until its window
    (``node.interval``) ends (a wake-up is asked for then)."""
    assert node.interval is not None  # a rate-limited stream
    batch, skipped = coalesce(node.waiting)
    if skipped:
        commands.extend(_coalesced(stream, skipped))
    commands.append(WakeAtCommand(now + node.interval))
    return replace(node, waiting=batch, gate=now + node.interval)


def coalesce(waiting: tuple[WorkItem, ...]) -> tuple[tuple[WorkItem, ...], list[WorkItem]]:
    """The newest waiting item of each input port (in seq order), and the rest."""
    newest: dict[object, WorkItem] = {}
    for item in waiting:
        newest[item.payload.get("port")] = item
    kept = {item.entry_id for item in newest.values()}
    batch = tuple(item for item in waiting if item.entry_id in kept)
    return batch, [item for item in waiting if item.entry_id not in kept]


def _coalesced(stream: StreamKey, skipped: list[WorkItem]) -> list[Command]:
    return [
        AckCommand(tuple(item.entry_id for item in skipped)),
        PublishEventCommand(
            "items_coalesced",
            {
                "flow": stream.flow,
                "node": stream.node,
                "skipped": len(skipped),
                "seqs": [skipped[0].seq, skipped[-1].seq],
            },
        ),
    ]
