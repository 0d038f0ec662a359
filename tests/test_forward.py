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
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mediaflow.config import EngineSettings, StoreSettings
from mediaflow.forward import ForwardSettings, forwarded_streams, plan
from mediaflow.forward.plan import CURSOR_NODE, read_cursors
from mediaflow.gc import GcSettings
from mediaflow.process import FlowProcess
from mediaflow.queue import open_queue
from mediaflow.queue.contract import StreamKey
from mediaflow.store import ArtifactStore
from tests.forward_support import CHUNKS, Chunks, Local, edge_flow, next_event, shared_items
from tests.redis_server import RedisServer, free_port
from tests.store_service import TOKEN, Service, start_service


def test_the_streams_a_box_forwards_are_its_central_nodes() -> None:
    spec = edge_flow()
    assert forwarded_streams(spec) == [StreamKey("edge", "heard")]


async def test_a_box_forwards_every_chunk_once_in_order_through_outages(
    tmp_path: Path, durable_redis_server: RedisServer
) -> None:
    Local.seen.clear()
    Chunks.resume = asyncio.Event()
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
        await next_event(events, "forward_unavailable")
        restarted.append(await asyncio.to_thread(start_service, tmp_path / "central", port=port))
        await next_event(events, "forward_available")
        await asyncio.to_thread(durable_redis_server.stop)  # the queue goes too, mid-run
        Chunks.resume.set()  # the second half has to wait in the journal
        await next_event(events, "forward_unavailable")
        await asyncio.to_thread(durable_redis_server.start)
        await next_event(events, "forward_available")
        assert await process.wait(for_s=60, until_idle=True) == "idle"
        shown = await _forward_shown(process)
    finally:
        Chunks.resume = None
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


async def test_an_idle_box_sees_its_link_go_and_come_back(
    tmp_path: Path, durable_redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan, "LINK_CHECK_EVERY_S", 0.3)
    service = start_service(tmp_path / "central")
    settings = ForwardSettings(
        queue_url=durable_redis_server.url, store=StoreSettings(service.url, TOKEN)
    )
    process = FlowProcess(edge_flow(), tmp_path / "box", forward=settings)
    events = process.bus.subscribe(
        types=frozenset({"forward_unavailable", "forward_available", "forward_lost"})
    )
    await process.start()
    try:
        forwarding = process.forwarding
        assert forwarding is not None
        status = forwarding.forwarder.status
        for _ in range(600):
            status = forwarding.forwarder.status
            if status.forwarded_items == CHUNKS:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"the capture was not forwarded: {status}")
        assert events.get_nowait() is None, "the link stayed up"
        # Nothing is left to send: only asking the link can tell that it went.
        await asyncio.to_thread(durable_redis_server.stop)
        await next_event(events, "forward_unavailable")
        assert forwarding.forwarder.status.link_up is False
        await asyncio.to_thread(durable_redis_server.start)
        await next_event(events, "forward_available")
        assert forwarding.forwarder.status.link_up is True
    finally:
        await process.stop()
        service.stop()


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
