"""What the forwarder shows (:class:`ForwardStatus`, for ``/metrics`` and ``/api``),
and what it needs of the box's journal and of the shared queue."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mediaflow.queue.contract import Delivery, Inspection, LatestValues, StreamKey


class LocalJournal(Delivery, LatestValues, Inspection, Protocol):
    """What the forwarder uses of the box's own queue (the SQLite queue: a box
    that forwards journals locally)."""

    async def waiting_bytes(self, streams: Sequence[StreamKey]) -> int:
        """Bytes of the artifacts the unacked items of ``streams`` reference."""
        ...


class SharedQueue(Delivery, LatestValues, Protocol):
    """What the forwarder uses of the shared queue."""


@dataclass(frozen=True)
class ForwardStatus:
    """What ``/metrics`` and ``/api`` show of forwarding."""

    link_up: bool
    forwarded_items: int
    forwarded_bytes: int
    lost_items: int
    last_forward_at: float | None
    backlog_items: int
    backlog_seconds: float
    backlog_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        """As ``/api/flows/{flow}`` shows it (``forward``)."""
        return {
            "link_up": self.link_up,
            "backlog_items": self.backlog_items,
            "backlog_s": round(self.backlog_seconds, 3),
            "backlog_bytes": self.backlog_bytes,
            "forwarded_items": self.forwarded_items,
            "forwarded_bytes": self.forwarded_bytes,
            "lost_items": self.lost_items,
            "last_forward_at": self.last_forward_at,
        }
