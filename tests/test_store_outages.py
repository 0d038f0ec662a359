"""Riding out an artifact service that is away, against a real ``mediaflow serve``
child that is not there yet (nothing listens on its port) and then starts: a
source's saves wait and land (mediaflow.engine.outages), a node's item that failed
only because of it costs no attempt, and what is told of it carries no secret."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from mediaflow import Context, FlowBuilder, FlowSession, MediaRef, Node
from mediaflow.config import EngineSettings, StoreSettings
from mediaflow.engine.events import EventBus
from mediaflow.engine.outages import StoreOutages
from mediaflow.store import RemoteArtifactStore, RemoteStoreError
from mediaflow.store.service import RetryPolicy
from tests.http_support import digest_of, random_bytes
from tests.redis_server import free_port
from tests.store_service import TOKEN, Service, start_service, temp_files

OUTAGE_EVENTS = frozenset({"store_unavailable", "store_available"})
FAST = RetryPolicy(attempts=2, backoff_s=0.01, backoff_max_s=0.02)
DEADLINE_S = 30.0


async def until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.02)


async def start_later(place: Path, port: int) -> Service:
    return await asyncio.to_thread(start_service, place, port=port)


def edge_store(port: int, cache: Path, token: str = TOKEN) -> RemoteArtifactStore:
    return RemoteArtifactStore(f"http://127.0.0.1:{port}", cache_dir=cache, token=token, retry=FAST)


async def test_a_source_save_waits_for_the_service_and_the_outage_is_told_once(
    tmp_path: Path,
) -> None:
    port = free_port()
    store = edge_store(port, tmp_path / "edge")
    bus = EventBus()
    outages = StoreOutages("edge", store, bus)
    data = random_bytes(50_000, seed=1)
    saving = asyncio.create_task(outages.save("mic", data, "audio/wav", {"seq": 0}))
    await until(lambda: bus.recent(types=OUTAGE_EVENTS), "store_unavailable")
    await asyncio.sleep(0.5)  # several more tries fail meanwhile
    assert not saving.done()
    service = await start_later(tmp_path, port)
    try:
        ref = await asyncio.wait_for(saving, DEADLINE_S)
        again = await outages.save("mic", random_bytes(10, seed=2), "audio/wav", {"seq": 1})
    finally:
        service.stop()
        store.close()
    assert ref.digest == digest_of(data) and ref.meta == {"seq": 0}
    assert service.has(ref.digest) and service.has(again.digest)
    unavailable, available = bus.recent(types=OUTAGE_EVENTS)
    assert (unavailable.type, available.type) == ("store_unavailable", "store_available")
    where = f"http://127.0.0.1:{port}"
    assert unavailable.data["error"].startswith("StoreUnreachable: ")
    assert {k: v for k, v in unavailable.data.items() if k != "error"} == {
        "flow": "edge",
        "node": "mic",
        "store": where,
    }
    assert available.data["store"] == where and available.data["away_s"] > 0.5
    assert TOKEN not in repr([unavailable.data, available.data])


async def test_a_stream_saved_while_the_service_is_away_is_spooled_and_read_once(
    tmp_path: Path,
) -> None:
    """An async iterator cannot be replayed: it is written to a temp file first,
    every try saves that file, and the file is gone once the save landed."""
    port = free_port()
    store = edge_store(port, tmp_path / "edge")
    outages = StoreOutages("edge", store, EventBus())
    parts = [random_bytes(300_000, seed=n) for n in range(4)]
    pulled: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for n, part in enumerate(parts):
            pulled.append(n)
            yield part

    saving = asyncio.create_task(outages.save("cam", chunks(), "video/mp4", None))
    await until(lambda: pulled == [0, 1, 2, 3], "the stream read")
    await asyncio.sleep(0.3)
    service = await start_later(tmp_path, port)
    try:
        ref = await asyncio.wait_for(saving, DEADLINE_S)
    finally:
        service.stop()
        store.close()
    assert ref.digest == digest_of(b"".join(parts)) and service.has(ref.digest)
    assert pulled == [0, 1, 2, 3], "the iterator was read once"
    assert temp_files(tmp_path / "edge") == [], "the spool was removed"


async def test_a_refusal_is_not_an_outage_and_is_raised_at_once(tmp_path: Path) -> None:
    service = await start_later(tmp_path, 0)
    port = int(service.url.rsplit(":", 1)[1])
    store = edge_store(port, tmp_path / "edge", token="not-the-token")
    bus = EventBus()
    try:
        with pytest.raises(RemoteStoreError) as refused:
            await StoreOutages("edge", store, bus).save("mic", b"x", "audio/wav", None)
    finally:
        service.stop()
        store.close()
    assert refused.value.status == 401
    assert bus.recent(types=OUTAGE_EVENTS) == []


# -- a node's item that failed only because the service was away ---------------------


class Numbers(Node):
    """A source of ``count`` numbers that saves nothing."""

    outputs: ClassVar[Mapping[str, str]] = {"n": "number"}

    def __init__(self, count: int) -> None:
        self.count = count

    async def run(self, ctx: Context) -> None:
        for n in range(self.count):
            await ctx.emit("n", n)


class Saver(Node):
    """Saves a few bytes per number it reads: its item fails while the service is away."""

    inputs: ClassVar[Mapping[str, str]] = {"n": "number"}
    outputs: ClassVar[Mapping[str, str]] = {"blob": "json"}

    def __init__(self) -> None:
        self.saved: dict[int, MediaRef] = {}

    async def run(self, ctx: Context) -> dict[str, Any]:
        n = int(ctx.inputs["n"])
        self.saved[n] = await ctx.save_artifact(f"blob {n}".encode(), "application/octet-stream")
        return {"blob": self.saved[n].digest}


async def test_an_item_failing_only_because_the_service_is_away_costs_no_attempt(
    tmp_path: Path,
) -> None:
    """With ``max_attempts = 1`` any other failure would dead-letter the item at
    once: these are retried, with the same attempt, until the service is there."""
    port = free_port()
    settings = EngineSettings(
        max_attempts=1,
        retry_base_s=0.05,
        retry_max_s=0.2,
        store=StoreSettings(url=f"http://127.0.0.1:{port}", token=TOKEN),
    )
    saver = Saver()
    flow = FlowBuilder("away").add("numbers", Numbers(5))
    flow.add("saver", saver, inputs={"n": "numbers.n"})
    bus = EventBus(history=10_000)
    session = FlowSession(flow.build(), tmp_path / "edge", settings=settings, bus=bus)
    await session.start()
    service: Service | None = None
    try:
        await until(lambda: len(bus.recent(types=frozenset({"cascade_retry"}))) >= 3, "retries")
        service = await start_later(tmp_path, port)
        reason = await asyncio.wait_for(session.wait(until_idle=True), DEADLINE_S)
        assert reason == "idle"
    finally:
        await session.stop()
        if service is not None:
            service.stop()
    assert sorted(saver.saved) == [0, 1, 2, 3, 4]
    assert all(service.has(ref.digest) for ref in saver.saved.values())
    assert bus.recent(types=frozenset({"cascade_dropped"})) == []
    retries = bus.recent(types=frozenset({"cascade_retry"}))
    assert {(e.data["attempt"], e.data["away"]) for e in retries} == {(1, "store")}
    assert {e.data["seq"] for e in retries} == {retries[0].data["seq"]}, "the line waited"
