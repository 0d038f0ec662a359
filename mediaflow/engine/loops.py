"""The runner's background loops: claim, ack, touch, reclaim, sample, flush.

Each loop is one coroutine with one job. Queue failures are reported once as
``queue_unavailable`` and retried with a capped backoff; ``queue_available``
follows when the backend answers again. Nothing here decides scheduling: the
loops fetch facts and feed them to the runner as ticks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mediaflow.engine.reduce import held_ids, wants
from mediaflow.engine.ticks import BacklogSampledTick
from mediaflow.media import present_value
from mediaflow.queue.contract import QueueError, StreamKey

if TYPE_CHECKING:
    from mediaflow.engine.runner import FlowRunner

log = logging.getLogger("mediaflow.engine")

CLAIM_POLL_S = 0.05
# Acks ride with emissions; alone, they wait up to ACK_LINGER_S (or ACK_BATCH
# of them) for company. An ack only frees the queue; delivery is not delayed.
ACK_BATCH = 256
ACK_LINGER_S = 0.002
LATEST_FLUSH_S = 0.5


class BackgroundLoops:
    """Owns the runner's long-lived tasks; :meth:`stop` cancels them."""

    def __init__(self, runner: FlowRunner) -> None:
        self.runner = runner
        self.tasks: list[asyncio.Task[None]] = []
        self.queue_down = False
        self.closing = False

    def start(self) -> None:
        lease_s = self.runner.settings.lease_ms / 1000
        self.tasks = [
            asyncio.create_task(self._guarded("claim", self.claim_once, 0.0)),
            asyncio.create_task(self._guarded("commit", self.commit_once, 0.0)),
            asyncio.create_task(self._guarded("touch", self.touch_once, lease_s / 3)),
            asyncio.create_task(self._guarded("reclaim", self.reclaim_once, lease_s / 2)),
            asyncio.create_task(
                self._guarded(
                    "backlog", self.sample_backlog_once, self.runner.settings.backlog_interval_s
                )
            ),
            asyncio.create_task(self._guarded("latest", self.flush_latest_once, LATEST_FLUSH_S)),
        ]

    async def stop(self) -> None:
        # The flag as well as the cancel: asyncio.wait_for in Python 3.11 can
        # swallow a cancellation that races with its inner wait completing.
        self.closing = True
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []

    async def _guarded(
        self, name: str, step: Callable[[], Awaitable[None]], interval_s: float
    ) -> None:
        backoff = 0.25
        while not self.closing:
            try:
                await step()
                backoff = 0.25
                if self.queue_down:
                    self.queue_down = False
                    self.runner.bus.publish("queue_available", {"loop": name})
            except QueueError as exc:
                if not self.queue_down:
                    self.queue_down = True
                    log.error("work queue unavailable (%s loop): %s", name, exc)
                    self.runner.bus.publish("queue_unavailable", {"loop": name, "error": str(exc)})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if interval_s:
                await asyncio.sleep(interval_s)

    async def claim_once(self) -> None:
        """Claim for streams with room and work on disk; when there is none, wait
        for a wake-up (local work left on disk, a reclaim, freed room) or, after
        ``CLAIM_POLL_S``, poll every stream for work other processes enqueued."""
        runner = self.runner
        want = wants(runner.state)
        runner.room_ready.clear()
        if want and await self._claim(want):
            return
        try:
            await asyncio.wait_for(runner.room_ready.wait(), CLAIM_POLL_S)
        except TimeoutError:
            want = wants(runner.state, caught_up_too=True)
            if want:
                await self._claim(want)

    async def _claim(self, want: dict[StreamKey, int]) -> bool:
        runner = self.runner
        # A claim that does not block runs its SQL without suspending (the
        # embedded backend's fast path), so comparing epochs across it tells
        # exactly whether anything was left on disk meanwhile.
        epochs = {stream: runner.behind_epoch(stream) for stream in want}
        items = await runner.queue.claim(runner.consumer, want)
        got: dict[StreamKey, int] = {}
        for item in items:
            got[item.stream] = got.get(item.stream, 0) + 1
        drained = frozenset(
            stream
            for stream, asked in want.items()
            if got.get(stream, 0) < asked and runner.behind_epoch(stream) == epochs[stream]
        )
        runner.on_claimed(items, drained)
        return bool(items)

    async def commit_once(self) -> None:
        """Group commit: emissions at once (readers wait for them), acks alone
        after a short linger so they batch. A new emission ends the linger."""
        runner = self.runner
        if not runner.has_unflushed():
            runner.outbox_ready.clear()
            await runner.outbox_ready.wait()
            return
        if not runner.outbox and len(runner.pending_acks) < ACK_BATCH:
            runner.emissions_ready.clear()
            with contextlib.suppress(TimeoutError):  # the linger simply ended
                await asyncio.wait_for(runner.emissions_ready.wait(), ACK_LINGER_S)
        await runner.flush()

    async def touch_once(self) -> None:
        runner = self.runner
        ids = held_ids(runner.state)
        if ids:
            await runner.queue.touch(runner.consumer, ids)
        if runner.state_store is not None and runner.run_id is not None:
            # The horizon is taken now, on the loop: every save finishing later
            # records a later saved_at (see engine.pins).
            horizon = runner.horizon()
            await asyncio.to_thread(runner.state_store.heartbeat, runner.run_id, horizon)

    async def reclaim_once(self) -> None:
        runner = self.runner
        released = await runner.queue.reclaim_stale(runner.settings.lease_ms)
        moved = await runner.queue.move_due(time.time())
        streams = {item.stream for item in released}
        if moved:
            streams |= set(runner.state.nodes)
        if streams:
            runner.mark_behind(frozenset(streams))

    async def sample_backlog_once(self) -> None:
        runner = self.runner
        per_flow = await runner.queue.backlog_flows()
        runner.dispatch(BacklogSampledTick(per_flow))
        summaries = runner.latency.take()
        if summaries:
            runner.bus.publish(
                "work_latency",
                {
                    "flow": runner.spec.name,
                    "nodes": {node: s.to_json() for node, s in summaries.items()},
                },
            )

    async def flush_latest_once(self) -> None:
        runner = self.runner
        if not runner.dirty_latest:
            return
        batch, runner.dirty_latest = runner.dirty_latest, {}
        flow = runner.spec.name
        await runner.queue.put_latest({(flow, node, port): v for (node, port), v in batch.items()})

    def write_jsonl(self, node: str, port: str, encoded: Any) -> None:
        stream = self.runner.jsonl
        if stream is None:
            return
        line = json.dumps({"node": node, "port": port, "value": present_value(encoded)})
        stream.write(line + "\n")
        stream.flush()
