"""The forwarder of an edge box: its local journal to the shared queue and service.

It claims the forwarded streams' items from the box's own queue (its journal,
oldest first per stream), uploads each item's artifact to the service, commits
the items to the shared queue with the streams' cursors (:mod:`.plan`), and
only then acks them locally. When the link fails, what it claimed is handed
back uncounted; it then probes the link every half second (the shared queue's
cheapest call and a ``HEAD`` to the service) and runs a full round as soon as
a probe answers (:func:`~.plan.step_while_down`), reporting
``forward_unavailable`` once per outage and ``forward_available`` when the link
answers again; capture never waits for it. Idle, it waits for the journal's
word that new items landed (``arrivals``), looking anyway every second, and
asks the link whether it answers when it has heard nothing from it for five
seconds (:func:`~.plan.link_check_due`): an outage is reported while there is
nothing to send, not first when there is. A call to the shared queue that has not
answered within :data:`SLOW_CALL_S` is reported as an outage too, while it goes
on: the queue sends a commit whose answer was lost again, under the same request
id, for up to 30 s (:mod:`mediaflow.queue.redis.once`), and an outage must not
wait for that to be seen.

The newest value of every port is sent ahead of the backlog (live values
first): whoever watches the flow where the work goes sees the present while
the past catches up. An item whose artifact is gone from the box (the disk
cap took it before the link came back) cannot be forwarded: it is acked,
counted and reported (``forward_lost``), and the stream goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Final, TypeVar, assert_never

from mediaflow.engine.events import EventBus
from mediaflow.forward.link import Link
from mediaflow.forward.plan import (
    CURSOR_NODE,
    LATEST_EVERY_S,
    Outage,
    Probe,
    Retry,
    choose_shed,
    cursor_values,
    idle_wait,
    link_check_due,
    plan_batch,
    probed,
    read_cursors,
    ref_of,
    shared_items,
    step_while_down,
)
from mediaflow.forward.status import ForwardStatus, LocalJournal, SharedQueue
from mediaflow.forward.uploads import Uploader
from mediaflow.media import MediaRef, decode_value
from mediaflow.queue.contract import (
    Delivery,
    QueueError,
    StreamKey,
    WorkItem,
)
from mediaflow.store import ArtifactStore, RemoteStoreError, StoreUnreachable
from mediaflow.store.service import ServiceClient

log = logging.getLogger("mediaflow.forward")

BATCH: Final = 64
"""Items claimed per stream at a time: small enough that a capped link touches
its claim often, large enough that one commit carries many."""
PROBE_DIGEST: Final = "sha256:" + hashlib.sha256(b"").hexdigest()
"""What a probe asks the service whether it holds (the digest of no bytes): any
answer, 200 or 404 or a refusal, says the service is there."""
LINK_ERRORS: Final = (QueueError, RemoteStoreError, OSError)
SLOW_CALL_S: Final = 2.0
"""A call to the shared queue that has not answered in this long reports an outage
(it takes milliseconds when the queue answers)."""
BACKLOG_EVERY_S: Final = 0.5
"""How often the backlog shown is read from the journal while the forwarder is busy
catching up or the link is down (idle, it is read every round)."""


T = TypeVar("T")


class Forwarder:
    """Forward the ``streams()`` of ``flow`` from ``local`` to ``shared`` (module doc).

    ``edge`` names this box among those forwarding the flow (its cursors);
    ``uploads`` talks to the artifact service and ``probe`` asks it whether it
    answers (a client that tries once, briefly; ``uploads`` if None);
    ``arrivals`` is set when the local journal commits new items (the forwarder
    clears it; None: it looks every :data:`~.plan.IDLE_WAIT_S`); ``max_bps`` caps
    the bytes of the backlog sent a second. :meth:`run` until cancelled.
    """

    def __init__(
        self,
        flow: str,
        streams: Callable[[], Sequence[StreamKey]],
        *,
        edge: str,
        local: LocalJournal,
        store: ArtifactStore,
        shared: SharedQueue,
        uploads: ServiceClient,
        bus: EventBus,
        probe: ServiceClient | None = None,
        arrivals: asyncio.Event | None = None,
        max_bps: int | None = None,
        lease_ms: int = 15_000,
    ) -> None:
        self.flow = flow
        self._streams = streams  # read each round: a reload may change them
        self.edge = edge
        self.consumer = f"forward:{edge}"
        self._local = local
        self._shared = shared
        self._uploader = Uploader(store, uploads, max_bps=max_bps)
        self._probe = probe or uploads
        self._arrivals = arrivals or asyncio.Event()
        self._bus = bus
        self._touch_every_s = lease_ms / 3000
        self._cursors: dict[str, int] | None = None  # read from the shared queue when it answers
        self._sent_latest: dict[tuple[str, str], Any] = {}
        self._latest_at = 0.0
        self._latest_skipped = False
        self.link = Link(flow, bus)
        self.rounds = 0  # full rounds tried (what the tests count)
        self._link_seen_at = time.monotonic()  # when a round or a check last reached it
        self._noted_at = 0.0
        self._counts = ForwardStatus(True, 0, 0, 0, None, 0, 0.0)  # link_up: see status

    @property
    def status(self) -> ForwardStatus:
        """What the API and the metrics show: the counts, and the link as it is now."""
        return replace(self._counts, link_up=self.link.up)

    async def run(self) -> None:
        """Forward until cancelled; never raises for the link."""
        while True:
            self._arrivals.clear()  # before looking: what lands from now on wakes the wait
            try:
                sent = await self.forward_once()
                if sent:
                    self._link_seen_at = time.monotonic()
                elif link_check_due(time.monotonic(), self._link_seen_at):
                    await self._ask_link()
                    self._link_seen_at = time.monotonic()
                if sent and time.monotonic() - self._noted_at >= BACKLOG_EVERY_S:
                    await self._note_backlog()  # catching up: the backlog shown shrinks
            except LINK_ERRORS as exc:
                self.link.failed(exc)
                await self._note_backlog_while_down()
                await self._until_the_link_answers()
                continue
            self.link.answered()
            if not sent:
                await self._note_backlog()
                wait_s = idle_wait(
                    time.monotonic(), self._latest_at, self._latest_skipped, self._link_seen_at
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrivals.wait(), wait_s)

    async def _until_the_link_answers(self) -> None:
        """After a failed round: probe the link until it answers, then return for
        the next round (:func:`~.plan.step_while_down` decides)."""
        outage = Outage(self.link.failures, time.monotonic())
        answered: bool | None = None
        while True:
            step = step_while_down(outage, answered, time.monotonic())
            match step:
                case Retry(after_s=after_s):
                    await asyncio.sleep(after_s)
                    return
                case Probe(after_s=after_s):
                    await asyncio.sleep(after_s)
                    answered = await self.probe()
                    outage = probed(outage, answered)
                    if not answered:
                        await self._note_backlog_while_down()
                case _:
                    assert_never(step)

    async def probe(self) -> bool:
        """Whether the shared queue and the service both answer: the queue's cheapest
        call the forwarder makes anyway (this flow's latest values, one small hash)
        and a ``HEAD`` of :data:`PROBE_DIGEST`. A refusal is an answer: the next
        round meets it and reports it."""
        self.link.probed()
        try:
            await self._ask_link()
        except LINK_ERRORS as exc:
            log.debug("forward: the link does not answer yet: %s", exc)
            return False
        return True

    async def _ask_link(self) -> None:
        """The probe's two questions; raises what the link raised if it does not
        answer. A refusal from the service is an answer."""
        await self._queue_call(self._shared.latest(self.flow))
        try:
            await asyncio.to_thread(self._probe.has, PROBE_DIGEST)
        except StoreUnreachable:
            raise
        except RemoteStoreError as exc:
            log.debug("forward: the service refused the probe: %s", exc)

    async def forward_once(self) -> int:
        """One round: the newest values, then a batch of the backlog. Returns how
        many items it took off the local journal. Raises what the link raised."""
        self.rounds += 1
        if self._cursors is None:
            # What an earlier forwarder of this box held when it died goes back first,
            # oldest first: sending newer items ahead of it would put it below the
            # cursors, where it would count as sent.
            await self._local.release_consumer(self.consumer)
            latest = await self._queue_call(self._shared.latest(self.flow))
            self._cursors = read_cursors(latest, self.edge)
        await self.forward_latest()
        items = await self._local.claim(self.consumer, dict.fromkeys(self._streams(), BATCH))
        if not items:
            return 0
        batch = plan_batch(items, self._cursors)
        try:
            lost = await self._upload_artifacts(batch.send)
            send = [item for item in batch.send if item.entry_id not in lost]
            cursors = cursor_values(self.flow, self.edge, batch.cursors)
            await self._queue_call(self._shared.commit(shared_items(send), latest=cursors))
        except BaseException:
            await _release_quietly(self._local, [i.entry_id for i in items])
            raise
        self._cursors.update(batch.cursors)
        try:
            await self._local.ack([i.entry_id for i in items])
        except BaseException:
            # They are in the shared queue: the next claim finds them below the
            # cursors and acks them without sending them again.
            await _release_quietly(self._local, [i.entry_id for i in items])
            raise
        self._report_lost([i for i in batch.send if i.entry_id in lost])
        self._counts = replace(
            self._counts,
            forwarded_items=self._counts.forwarded_items + len(send),
            last_forward_at=time.time(),
        )
        return len(items)

    async def _upload_artifacts(self, items: Sequence[WorkItem]) -> set[str]:
        """Upload the artifact of each item that has one (once a digest, while the
        service remembers it); the entry ids of items whose artifact is gone."""
        lost: set[str] = set()
        touched = time.monotonic()
        for item in items:
            ref = ref_of(item)
            if ref is None:
                continue
            if not await self._upload(ref, capped=True):
                lost.add(item.entry_id)
            if time.monotonic() - touched > self._touch_every_s:
                await self._local.touch(self.consumer, [i.entry_id for i in items])
                touched = time.monotonic()
        return lost

    async def _upload(self, ref: MediaRef, *, capped: bool) -> bool:
        """Send ``ref``'s bytes (:class:`~.uploads.Uploader`); False if the box no longer
        has them. Raises what the service raised."""
        sent = await self._uploader.send(ref, capped=capped)
        if sent is None:
            return False
        if sent:
            self._counts = replace(
                self._counts, forwarded_bytes=self._counts.forwarded_bytes + sent
            )
        return True

    async def forward_latest(self, *, now: bool = False) -> None:
        """Send the ports' newest values the shared queue lacks, artifacts first
        and outside the rate cap: the present goes ahead of the backlog. At most
        every :data:`LATEST_EVERY_S` unless ``now``. Raises what the link raised."""
        at = time.monotonic()
        self._latest_skipped = not now and at - self._latest_at < LATEST_EVERY_S
        if self._latest_skipped:
            return
        self._latest_at = at
        latest = await self._local.latest(self.flow)
        changed = {
            key: value
            for key, value in latest.items()
            if key[0] != CURSOR_NODE and self._sent_latest.get(key) != value
        }
        if not changed:
            return
        for key, value in list(changed.items()):
            ref = decode_value(value)
            if isinstance(ref, MediaRef) and not await self._upload(ref, capped=False):
                del changed[key]  # gone from the box: nothing to show
        values = {(self.flow, n, p): v for (n, p), v in changed.items()}
        await self._queue_call(self._shared.put_latest(values))
        self._sent_latest.update(changed)

    async def _note_backlog_while_down(self) -> None:
        """The backlog shown grows while the link is down: the journal is local and
        answers (if it does not, the session's own loops report it)."""
        if time.monotonic() - self._noted_at < BACKLOG_EVERY_S:
            return
        try:
            await self._note_backlog()
        except QueueError as exc:
            log.debug("forward: the journal's backlog is not known now: %s", exc)

    async def _note_backlog(self) -> None:
        self._noted_at = time.monotonic()
        streams = self._streams()
        backlog = await self._local.backlog()
        mine = [backlog[s] for s in streams if s in backlog]
        oldest = min((b.oldest_enqueued_at for b in mine if b.oldest_enqueued_at), default=None)
        items = sum(b.total for b in mine)
        try:
            size = await self._local.waiting_bytes(streams) if items else 0
        except sqlite3.Error as exc:
            log.debug("forward: the backlog's bytes are not known now: %s", exc)
            size = self._counts.backlog_bytes
        self._counts = replace(
            self._counts,
            backlog_items=items,
            backlog_seconds=max(0.0, time.time() - oldest) if oldest else 0.0,
            backlog_bytes=size,
        )

    async def give_way(self, excess_bytes: int) -> int:
        """Give up the oldest waiting items whose artifacts add up to ``excess_bytes``
        (the store is over its cap with only live references left: the link stayed
        away longer than the disk lasts). Their artifacts become the sweep's to
        evict, oldest first, with its usual events; the items are counted and
        reported as lost. Returns the bytes given up (0 if the journal is away)."""
        try:
            items = await self._local.claim(self.consumer, dict.fromkeys(self._streams(), BATCH))
            shed = choose_shed(items, excess_bytes)
            given_up = {i.entry_id for i in shed}
            await self._local.ack(list(given_up))
            rest = [i.entry_id for i in items if i.entry_id not in given_up]
            await self._local.release(rest, started=False)
        except QueueError as exc:
            log.warning("forward: could not give up the oldest waiting items: %s", exc)
            return 0
        self._report_lost(shed)
        return sum(ref.size for i in shed if (ref := ref_of(i)) is not None)

    def _report_lost(self, lost: Sequence[WorkItem]) -> None:
        if not lost:
            return
        self._counts = replace(self._counts, lost_items=self._counts.lost_items + len(lost))
        by_node: dict[str, list[int]] = {}
        for item in lost:
            by_node.setdefault(item.stream.node, []).append(item.seq)
        for node, seqs in by_node.items():
            log.warning(
                "forward: %d item(s) of %s/%s lost: the link stayed away longer than"
                " this box's store could hold them",
                len(seqs),
                self.flow,
                node,
            )
            self._bus.publish("forward_lost", {"flow": self.flow, "node": node, "items": len(seqs)})

    async def _queue_call(self, call: Awaitable[T]) -> T:
        """``await call`` (one call to the shared queue), reporting the link down
        if it has not answered within :data:`SLOW_CALL_S` (module doc)."""
        task = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({task}, timeout=SLOW_CALL_S)
            if not done:
                self.link.down(f"the shared queue has not answered in {SLOW_CALL_S:g} s")
            return await task
        finally:
            task.cancel()  # when this is cancelled; done, it has no effect


async def _release_quietly(local: Delivery, entry_ids: Sequence[str]) -> None:
    """Hand claimed items back uncounted: the link failed, not the items."""
    # If the local journal is away too, its reclaim loop hands them back.
    with contextlib.suppress(QueueError):
        await local.release(entry_ids, started=False)
