"""What the work-queue contract tests (``tests/test_queue_contract_*.py``, one
role each) share: three streams, items numbered ``n``, and the idle times of the reclaim
tests. The backends come from the ``queue`` and ``queue_backend`` fixtures in
``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mediaflow.queue import NewItem, StreamKey, WorkItem, WorkQueue

A = StreamKey("f1", "a")
B = StreamKey("f1", "b")
C = StreamKey("f2", "c")

IDLE_MS = 100  # "stale" in reclaim tests
PAST_IDLE_S = 0.15  # sleep this long to make a claim stale


def new(stream: StreamKey, n: int, **options: Any) -> NewItem:
    return NewItem(stream, "emission", {"n": n}, **options)


def ns(items: Sequence[WorkItem]) -> list[int]:
    return [item.payload["n"] for item in items]


def ids(items: Sequence[WorkItem]) -> list[str]:
    return [item.entry_id for item in items]


async def fill(queue: WorkQueue, stream: StreamKey, count: int, start: int = 0) -> list[WorkItem]:
    return await queue.commit([new(stream, start + i) for i in range(count)])
