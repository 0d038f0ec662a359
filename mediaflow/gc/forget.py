"""Forgetting a flow: drop what a flow that will not run again leaves behind.

A flow's latest values, dead letters and ended run records are roots of the
sweep (see :mod:`mediaflow.gc`); :func:`forget_flow` drops them so the next
sweep takes the artifacts only they held. ``mediaflow gc --forget-flow`` calls
it before its sweep.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from mediaflow.engine.ownership import owner_alive
from mediaflow.engine.state_store import StateStore
from mediaflow.queue import QueueError, QueueUnavailable, Retention


class FlowNotForgettable(Exception):
    """The flow runs, or its last run did not end, or items still wait for it."""


async def forget_flow(
    data_dir: Path, queue: Retention, flow: str, *, lease_s: float
) -> dict[str, int]:
    """Drop ``flow``'s latest values, dead letters and ended run records.

    ``lease_s`` is the engine's lease (``EngineSettings.lease_ms`` in seconds):
    a run whose owner is on another host counts as alive while its heartbeat is
    younger than two leases. Returns the counts dropped (the queue's, plus
    ``runs``). Raises :class:`FlowNotForgettable` if the flow has an open run or
    waiting items, ``QueueError`` / ``sqlite3.Error`` if a backend fails.
    """
    state = await asyncio.to_thread(StateStore, data_dir)
    try:
        open_runs = [r for r in await asyncio.to_thread(state.open_runs) if r.flow == flow]
        for record in open_runs:
            if owner_alive(record.owner, record.heartbeat_at, lease_s):
                raise FlowNotForgettable(
                    f"flow {flow!r} is running (run {record.run_id}, owner {record.owner}); "
                    "stop it before forgetting it"
                )
            raise FlowNotForgettable(
                f"flow {flow!r}'s last run {record.run_id} did not end (its process died); "
                "run the flow again and stop it cleanly before forgetting it"
            )
        try:
            dropped = dict(await queue.forget_flow(flow))
        except QueueUnavailable:
            raise
        except QueueError as exc:  # the queue refused: items of the flow still wait
            raise FlowNotForgettable(f"cannot forget flow {flow!r}: {exc}") from exc
        dropped["runs"] = await asyncio.to_thread(state.forget_flow, flow)
    finally:
        await asyncio.to_thread(state.close)
    return dropped
