"""The work-queue contract of the gate, run against every backend in
``QUEUE_BACKENDS`` (fixtures ``queue``, ``queue_backend``): a parked flow hands
out nothing until it is unparked; ``unpark(flow, steps=n)`` lets exactly ``n``
items through, shared by the flow's streams; parking again cancels steps left.
"""

from __future__ import annotations

import pytest

from mediaflow.queue import Gate, WorkQueue
from tests.queue_contract_helpers import A, B, C, fill, ns

ROLE = Gate
"""The role of the queue this module holds the contract of (see
``tests/test_queue_contract_roles.py``)."""


# -- park and unpark -----------------------------------------------------------


async def test_parked_flow_hands_out_nothing_until_unparked(queue: WorkQueue) -> None:
    await fill(queue, A, 2)
    await fill(queue, C, 2)

    await queue.park("f1")
    assert await queue.parked() == {"f1": None}
    assert {i.stream for i in await queue.claim("c", {A: 5, C: 5})} == {C}

    await queue.unpark("f1")
    assert await queue.parked() == {}
    assert ns(await queue.claim("c", {A: 5})) == [0, 1]


@pytest.mark.parametrize(("steps", "wants", "handed_out"), [(1, 5, 1), (3, 2, 2), (3, 5, 3)])
async def test_unpark_with_steps_lets_exactly_that_many_through(
    queue: WorkQueue, steps: int, wants: int, handed_out: int
) -> None:
    await fill(queue, A, 5)
    await queue.park("f1")

    await queue.unpark("f1", steps=steps)
    first = await queue.claim("c", {A: wants})
    rest = await queue.claim("c", {A: 5})

    assert len(first) + len(rest) == steps
    assert len(first) == handed_out
    assert ns(first + rest) == list(range(steps))
    assert await queue.parked() == {"f1": None}
    assert await queue.claim("c", {A: 5}) == []


async def test_steps_are_shared_by_the_streams_of_a_flow(queue: WorkQueue) -> None:
    await fill(queue, A, 3)
    await fill(queue, B, 3)
    await queue.park("f1")
    await queue.unpark("f1", steps=4)

    claimed = await queue.claim("c", {A: 3, B: 3})

    assert len(claimed) == 4
    assert await queue.parked() == {"f1": None}


async def test_park_again_cancels_steps_left(queue: WorkQueue) -> None:
    await queue.unpark("f1", steps=3)
    assert await queue.parked() == {"f1": 3}
    await queue.park("f1")
    assert await queue.parked() == {"f1": None}
