"""The forwarder's decisions, as pure functions of what it holds and what time it is.

Exactly once rests on a *cursor* per forwarded stream: the last local ``seq``
the shared queue has, written by the same commit that carries the items (a
latest value under :data:`CURSOR_NODE`, so the write is atomic with them). A
forwarder that died between that commit and its local ack finds the items
again on restart, below its cursor, and acks them without sending them twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from mediaflow.media import MediaRef, decode_value
from mediaflow.queue.contract import NewItem, StreamKey, WorkItem

CURSOR_NODE: Final = "~forwarded"
"""The node name cursors are stored under among a flow's latest values; no
node can be named so (ids are identifiers), and readers of latest values skip it."""

FIRST_PAUSE_S: Final = 0.2
LONGEST_PAUSE_S: Final = 5.0


def cursor_port(edge: str, node: str) -> str:
    """The port of ``node``'s cursor for the box ``edge``: boxes forward one flow's
    streams side by side, each with its own local ``seq``."""
    return f"{edge}/{node}"


def read_cursors(latest: Mapping[tuple[str, str], Any], edge: str) -> dict[str, int]:
    """``node -> last forwarded seq`` of this box, from a flow's latest values."""
    prefix = f"{edge}/"
    return {
        port.removeprefix(prefix): int(value)
        for (node, port), value in latest.items()
        if node == CURSOR_NODE and port.startswith(prefix) and isinstance(value, int)
    }


@dataclass(frozen=True)
class Batch:
    """What to do with items claimed from the local journal.

    ``send``: in local ``seq`` order per stream, not yet in the shared queue;
    ``already``: below a stream's cursor (sent by a forwarder that died before
    its local ack), acked without sending; ``cursors``: each stream's cursor
    once ``send`` has landed."""

    send: tuple[WorkItem, ...]
    already: tuple[WorkItem, ...]
    cursors: Mapping[str, int]


def plan_batch(items: Iterable[WorkItem], cursors: Mapping[str, int]) -> Batch:
    send: list[WorkItem] = []
    already: list[WorkItem] = []
    moved: dict[str, int] = {}
    for item in sorted(items, key=lambda i: (i.stream.node, i.seq)):
        node = item.stream.node
        if item.seq <= cursors.get(node, 0):
            already.append(item)
            continue
        send.append(item)
        moved[node] = max(item.seq, moved.get(node, 0))
    return Batch(tuple(send), tuple(already), moved)


def shared_items(send: Iterable[WorkItem]) -> list[NewItem]:
    """The items to commit to the shared queue: each local item's payload as it
    is (source, port, value and emission time), ready for the flow's executors."""
    return [
        NewItem(StreamKey(i.stream.flow, i.stream.node), i.kind, i.payload, False) for i in send
    ]


def cursor_values(
    flow: str, edge: str, cursors: Mapping[str, int]
) -> dict[tuple[str, str, str], int]:
    """The latest values that record ``cursors`` in the shared queue."""
    return {(flow, CURSOR_NODE, cursor_port(edge, node)): seq for node, seq in cursors.items()}


def ref_of(item: WorkItem) -> MediaRef | None:
    """The artifact an item's value references, if it is a reference."""
    value = decode_value(item.payload.get("value"))
    return value if isinstance(value, MediaRef) else None


def pause_after(failures: int) -> float:
    """How long to wait before trying the link again after ``failures`` in a row."""
    return float(min(LONGEST_PAUSE_S, FIRST_PAUSE_S * 2 ** max(0, failures - 1)))


@dataclass
class RateBudget:
    """A token bucket of bytes: at most ``bytes_per_s`` on average, with up to a
    second's worth sent at once after a quiet spell. Time is passed in."""

    bytes_per_s: int
    allowance: float = 0.0
    at: float = field(default_factory=time.monotonic)

    def wait_for(self, size: int, now: float) -> float:
        """Take ``size`` bytes; return how long to wait before sending them."""
        self.allowance = min(
            float(self.bytes_per_s), self.allowance + (now - self.at) * self.bytes_per_s
        )
        self.at = now
        self.allowance -= size
        return 0.0 if self.allowance >= 0 else -self.allowance / self.bytes_per_s


def choose_shed(items: Iterable[WorkItem], target: int) -> list[WorkItem]:
    """The oldest waiting items whose artifacts add up to ``target`` bytes: what the
    box gives up when the link stays away longer than its disk lasts. Items with
    no artifact free nothing and are kept."""
    chosen: list[WorkItem] = []
    freed = 0
    for item in sorted(items, key=lambda i: (i.enqueued_at, i.stream.node, i.seq)):
        if freed >= target:
            break
        ref = ref_of(item)
        if ref is None:
            continue
        chosen.append(item)
        freed += ref.size
    return chosen
