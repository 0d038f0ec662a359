"""What the reducer reports besides its effects: the events of a step, a retry and
a dead letter. Pure builders of commands, for :mod:`.reduce`."""

from __future__ import annotations

from mediaflow.engine.commands import Command, DeadLetterCommand, PublishEventCommand
from mediaflow.queue.contract import WorkItem


def stepped_event(item: WorkItem) -> PublishEventCommand:
    """Which item a step of a paused flow started (the step's answer)."""
    return PublishEventCommand(
        "flow_stepped",
        {
            "flow": item.stream.flow,
            "node": item.stream.node,
            "entry_id": item.entry_id,
            "seq": item.seq,
            "deliveries": item.deliveries,
            "enqueued_at": item.enqueued_at,
        },
    )


def retry_event(
    item: WorkItem, attempt: int, delay: float, error: str, *, away: str | None = None
) -> PublishEventCommand:
    """An item's run failed and runs again in ``delay`` seconds. ``attempt`` is the
    attempt that failed. ``away``: the dependency whose being away was the only
    cause (``"store"``, ``"queue"``), so the retry counts that attempt again."""
    data = {
        "flow": item.stream.flow,
        "node": item.stream.node,
        "entry_id": item.entry_id,
        "seq": item.seq,
        "attempt": attempt,
        "retry_in_s": delay,
        "error": error,
    }
    if away is not None:
        data["away"] = away
    return PublishEventCommand("cascade_retry", data)


def dropped(item: WorkItem, reason: str, attempts: int) -> list[Command]:
    return [
        DeadLetterCommand(item, reason),
        PublishEventCommand(
            "cascade_dropped",
            {
                "flow": item.stream.flow,
                "node": item.stream.node,
                "entry_id": item.entry_id,
                "seq": item.seq,
                "deliveries": item.deliveries,
                "attempts": attempts,
                "reason": reason,
            },
        ),
    ]
