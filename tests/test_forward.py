"""An edge box that rides out its uplink (issue 27): the flow's run journals and
stores locally, and its forwarder carries the other nodes' work to a real Redis
and a real artifact service (``mediaflow serve``, a child process), while both are
stopped and started again under it.

What must hold whatever the timing: every item reaches the shared queue once, in
the order the source emitted it, and every artifact it references is on the
service before anyone can claim the item.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import pytest

from mediaflow import Context, FlowBuilder, Node
from mediaflow.config import EngineSettings, StoreSettings
from mediaflow.engine.events import EventBus
from mediaflow.forward import Forwarder, ForwardSettings, forwarded_streams, plan
from mediaflow.forward.plan import CURSOR_NODE, read_cursors
from mediaflow.gc import GcSettings
from mediaflow.process import FlowProcess
from mediaflow.queue import open_queue
from mediaflow.queue.contract import NewItem, QueueUnavailable, StreamKey, WorkItem
from mediaflow.queue.sqlite import SqliteQueue
from mediaflow.store import ArtifactStore
from mediaflow.store.service import ServiceClient
from tests.redis_server import RedisServer, free_port
from tests.store_service import TOKEN, Service, start_service

CHUNKS = 60


class Chunks(Node):
    """A source of ``CHUNKS`` audio artifacts of about ``size`` bytes, one every 30 ms,
    each naming its seq."""

    outputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    def __init__(self, size: int = 400) -> None:
        self.size = size

    async def run(self, ctx: Context) -> None:
        for seq in range(CHUNKS):
            line = f"chunk {seq} ".encode()
            payload = line * (self.size // len(line))
            ref = await ctx.save_artifact(payload, "audio/x-test", {"seq": seq})
            await ctx.emit("audio", ref)
            await asyncio.sleep(0.03)


class Heard(Node):
    """Where the chunks are consumed: on the shared side (it never runs here)."""

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    async def run(self, ctx: Context) -> None:
        return None


class Local(Node):
    """A consumer on the box itself (``edge = true``): it runs on the local journal."""

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}
    seen: ClassVar[list[int]] = []

    async def run(self, ctx: Context) -> None:
        Local.seen.append(ctx.inputs["audio"].meta["seq"])


def edge_flow(size: int = 400) -> Any:
    return (
        FlowBuilder("edge")
        .add("mic", Chunks, size=size)
        .add("heard", Heard, inputs={"audio": "mic.audio"})
        .add("local", Local, inputs={"audio": "mic.audio"}, edge=True)
        .build()
    )


async def shared_items(redis: RedisServer, stream: StreamKey) -> list[WorkItem]:
    queue = open_queue(redis.url, Path("/nonexistent"))
    try:
        return await queue.claim("check", {stream: 10 * CHUNKS})
    finally:
        await queue.close()


def test_the_streams_a_box_forwards_are_its_central_nodes() -> None:
    spec = edge_flow()
    assert forwarded_streams(spec) == [StreamKey("edge", "heard")]


async def test_a_box_forwards_every_chunk_once_in_order_through_outages(
    tmp_path: Path, durable_redis_server: RedisServer
) -> None:
    Local.seen.clear()
    service = start_service(tmp_path / "central")
    port = int(service.url.rsplit(":", 1)[1])
    service.stop()  # the uplink is down when the box starts
    settings = ForwardSettings(
        queue_url=durable_redis_server.url, store=StoreSettings(service.url, TOKEN)
    )
    process = FlowProcess(edge_flow(), tmp_path / "box", forward=settings, port=0)
    events = process.bus.subscribe(
        types=frozenset({"forward_unavailable", "forward_available", "forward_lost"})
    )
    restarted: list[Service] = []
    await process.start()
    try:
        await _next(events, "forward_unavailable")
        restarted.append(await asyncio.to_thread(start_service, tmp_path / "central", port=port))
        await _next(events, "forward_available")
        await asyncio.to_thread(durable_redis_server.stop)  # the queue goes too, mid-run
        await _next(events, "forward_unavailable")
        await asyncio.to_thread(durable_redis_server.start)
        await _next(events, "forward_available")
        assert await process.wait(for_s=60, until_idle=True) == "idle"
        shown = await _forward_shown(process)
    finally:
        await process.stop()
        for running in restarted:
            running.stop()
    items = await shared_items(durable_redis_server, StreamKey("edge", "heard"))
    seqs = [item.payload["value"]["$ref"]["meta"]["seq"] for item in items]
    assert seqs == list(range(CHUNKS)), "each chunk once, in the order emitted"
    assert all(item.payload["src"] == "mic.audio" for item in items)
    digests = {item.payload["value"]["$ref"]["digest"] for item in items}
    assert all(restarted[0].has(digest) for digest in digests)
    assert Local.seen == list(range(CHUNKS)), "the box's own consumer ran from its journal"
    api, metrics = shown
    assert api["link_up"] is True and api["backlog_items"] == 0 and api["lost_items"] == 0
    assert api["backlog_bytes"] == 0
    assert api["forwarded_items"] == CHUNKS and api["forwarded_bytes"] > 0
    assert api["last_forward_at"] is not None
    assert f'mediaflow_forward_items_total{{flow="edge"}} {CHUNKS}.0' in metrics
    assert 'mediaflow_forward_backlog_items{flow="edge"} 0.0' in metrics
    latest = await _latest(durable_redis_server)
    assert read_cursors(latest, _edge_id(tmp_path / "box")) == {"heard": CHUNKS}
    assert latest[("mic", "audio")]["$ref"]["meta"]["seq"] == CHUNKS - 1


async def _forward_shown(process: FlowProcess) -> tuple[dict[str, Any], str]:
    """``forward`` of ``/api/flows/edge`` once its backlog reads empty, and ``/metrics``."""
    assert process.url is not None
    async with aiohttp.ClientSession() as client:
        for _ in range(100):
            async with client.get(f"{process.url}/api/flows/edge") as response:
                assert response.status == 200
                shown: dict[str, Any] = (await response.json())["forward"]
            if shown["backlog_items"] == 0:
                break
            await asyncio.sleep(0.05)
        async with client.get(f"{process.url}/metrics") as response:
            return shown, await response.text()


async def _next(events: Any, kind: str, timeout_s: float = 30.0) -> None:
    while True:
        event = await events.get(timeout=timeout_s)
        if event is None:
            pytest.fail(f"no {kind} event in {timeout_s} s")
        if event.type == kind:
            return


async def _latest(redis: RedisServer) -> dict[tuple[str, str], Any]:
    queue = open_queue(redis.url, Path("/nonexistent"))
    try:
        return await queue.latest("edge")
    finally:
        await queue.close()


def _edge_id(data_dir: Path) -> str:
    return (data_dir / "edge-id").read_text().strip()


def test_cursor_node_is_no_node_name() -> None:
    from mediaflow.flows.spec import NAME_RE

    assert not NAME_RE.match(CURSOR_NODE)


async def journal_levels(local: SqliteQueue, stream: StreamKey, count: int) -> None:
    """``count`` plain values (no artifacts) waiting in the box's journal for ``stream``."""
    payloads = [{"src": "mic.level", "port": "level", "value": n, "at": 1.0} for n in range(count)]
    await local.commit([NewItem(stream, "emission", p, claim=False) for p in payloads])


def levels_forwarder(
    stream: StreamKey, local: SqliteQueue, shared: Any, tmp_path: Path
) -> Forwarder:
    """A forwarder of ``stream`` for box "box", with no artifacts to upload."""
    return Forwarder(
        "edge",
        lambda: [stream],
        edge="box",
        local=local,
        store=ArtifactStore(tmp_path / "store"),
        shared=shared,
        uploads=ServiceClient("http://127.0.0.1:9"),  # no artifacts here: never asked
        bus=EventBus(),
    )


class AckFailsOnce(SqliteQueue):
    """The box's own journal, whose first ack fails: the forwarder has committed
    to the shared queue and cannot record that here (a crash at that point)."""

    failed = False

    async def ack(self, entry_ids: Sequence[str]) -> int:
        if not self.failed:
            self.failed = True
            raise QueueUnavailable("the box's journal did not answer")
        return await super().ack(entry_ids)


async def test_items_committed_but_not_acked_here_are_not_sent_twice(
    tmp_path: Path, fresh_redis: RedisServer
) -> None:
    stream = StreamKey("edge", "heard")
    local = AckFailsOnce(tmp_path / "queue.sqlite3")
    await journal_levels(local, stream, 5)
    shared = open_queue(fresh_redis.url, tmp_path)
    forwarder = levels_forwarder(stream, local, shared, tmp_path)
    try:
        with pytest.raises(QueueUnavailable):
            await forwarder.forward_once()
        assert await forwarder.forward_once() == 5  # found again, below the cursor: acked
        assert await forwarder.forward_once() == 0
        assert (await local.backlog()).get(stream) is None
    finally:
        await shared.close()
        await local.close()
    items = await shared_items(fresh_redis, stream)
    assert [item.payload["value"] for item in items] == list(range(5))


async def test_a_box_over_its_cap_gives_up_the_oldest_and_forwards_the_rest(
    tmp_path: Path, fresh_redis: RedisServer
) -> None:
    Local.seen.clear()
    url = f"http://127.0.0.1:{free_port()}"  # the service is not there yet
    box = tmp_path / "box"
    cap = 100_000  # 60 chunks of 4 kB make 240 kB
    process = FlowProcess(
        edge_flow(size=4000),
        box,
        forward=ForwardSettings(queue_url=fresh_redis.url, store=StoreSettings(url, TOKEN)),
        settings=EngineSettings(lease_ms=1500),  # the run's GC horizon moves every 0.5 s
        gc_settings=GcSettings(interval_s=0, max_bytes=cap, cap_check_s=0.05, grace_s=0),
    )
    events = process.bus.subscribe(types=frozenset({"forward_lost", "artifact_evicted"}))
    services: list[Service] = []
    await process.start()
    try:
        forwarding = process.forwarding
        assert forwarding is not None
        store = ArtifactStore(box)
        for _ in range(600):
            settled = len(Local.seen) == CHUNKS and store.total_bytes() <= cap
            if settled and forwarding.forwarder.status.lost_items:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"the box did not get under its cap: {store.total_bytes()} bytes")
        port = int(url.rsplit(":", 1)[1])
        services.append(await asyncio.to_thread(start_service, tmp_path / "central", port=port))
        assert await process.wait(for_s=60, until_idle=True) == "idle"
        lost = forwarding.forwarder.status.lost_items
    finally:
        await process.stop()
        for service in services:
            service.stop()
    items = await shared_items(fresh_redis, StreamKey("edge", "heard"))
    seqs = [item.payload["value"]["$ref"]["meta"]["seq"] for item in items]
    assert seqs == list(range(lost, CHUNKS)), "the oldest went; everything after arrived, in order"
    reported = evicted = 0
    while (event := events.get_nowait()) is not None:
        if event.type == "forward_lost":
            reported += event.data["items"]
        else:
            evicted += 1
    assert reported == lost and evicted >= lost
    assert all(services[0].has(item.payload["value"]["$ref"]["digest"]) for item in items)


async def test_what_a_dead_forwarder_held_goes_first_and_is_not_lost(
    tmp_path: Path, fresh_redis: RedisServer
) -> None:
    stream = StreamKey("edge", "heard")
    local = SqliteQueue(tmp_path / "queue.sqlite3")
    await journal_levels(local, stream, 6)
    held = await local.claim("forward:box", {stream: 2})  # the box died holding these
    assert [item.payload["value"] for item in held] == [0, 1]
    shared = open_queue(fresh_redis.url, tmp_path)
    forwarder = levels_forwarder(stream, local, shared, tmp_path)
    try:
        while await forwarder.forward_once():
            pass
    finally:
        await shared.close()
        await local.close()
    items = await shared_items(fresh_redis, stream)
    assert [item.payload["value"] for item in items] == list(range(6))


async def test_the_backlog_shown_grows_while_the_link_is_down(
    tmp_path: Path, fresh_redis: RedisServer
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # no service there: every upload fails
    settings = ForwardSettings(queue_url=fresh_redis.url, store=StoreSettings(url, TOKEN))
    process = FlowProcess(edge_flow(), tmp_path / "box", forward=settings)
    await process.start()
    try:
        forwarding = process.forwarding
        assert forwarding is not None
        for _ in range(200):
            status = forwarding.forwarder.status
            if not status.link_up and status.backlog_items >= CHUNKS // 2:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"the backlog shown did not grow with the link down: {status}")
        assert status.backlog_seconds > 0 and status.forwarded_items == 0
        # Each chunk references its own 396-400-byte artifact (Chunks' default size);
        # the bytes are read just after the items are counted, when more may wait.
        assert 396 * status.backlog_items <= status.backlog_bytes <= 400 * CHUNKS
    finally:
        await process.stop()


async def test_an_idle_box_waits_for_its_journal_not_a_clock(
    tmp_path: Path, fresh_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan, "IDLE_WAIT_S", 3600.0)  # only the journal's word wakes it
    service = start_service(tmp_path / "central")
    settings = ForwardSettings(queue_url=fresh_redis.url, store=StoreSettings(service.url, TOKEN))
    process = FlowProcess(edge_flow(), tmp_path / "box", forward=settings)
    await process.start()
    try:
        forwarding = process.forwarding
        assert forwarding is not None
        forwarder = forwarding.forwarder
        for _ in range(600):
            if forwarder.status.forwarded_items == CHUNKS:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"not forwarded as the journal committed: {forwarder.status}")
        rounds = forwarder.rounds
        await asyncio.sleep(1.0)  # nothing lands: the capture is over
        # At most the round after the last that sent and one for the newest values.
        assert forwarder.rounds - rounds <= 2, "an idle forwarder does not poll"
    finally:
        await process.stop()
        service.stop()
    items = await shared_items(fresh_redis, StreamKey("edge", "heard"))
    assert [item.payload["value"]["$ref"]["meta"]["seq"] for item in items] == list(range(CHUNKS))
