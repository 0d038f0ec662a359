"""GC next to running flows: sweeps never pull bytes from under a consumer; the cap holds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from mediaflow import Context, FlowBuilder, FlowSession, MediaRef, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.events import EventBus
from mediaflow.gc import GcSettings, Sweeper, sweep_artifacts
from mediaflow.queue.sqlite import SqliteQueue
from mediaflow.store import ArtifactStore

FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)


class ChunkSource(Node):
    """Saves ``count`` distinct chunks and emits each: every one is a new artifact."""

    outputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    def __init__(self, count: int = 200) -> None:
        self.count = count

    async def run(self, ctx: Context) -> None:
        for seq in range(self.count):
            data = f"chunk {seq:06d} ".encode() * 40
            ref = await ctx.save_artifact(data, "audio/wav", {"seq": seq})
            await ctx.emit("audio", ref)


class SlowReader(Node):
    """Reads every chunk's bytes after a pause: a consumer far behind its source."""

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}
    read: ClassVar[list[int]] = []

    def __init__(self, delay_s: float = 0.004) -> None:
        self.delay_s = delay_s

    async def setup(self, ctx: Context) -> None:
        SlowReader.read = []

    async def run(self, ctx: Context) -> None:
        ref = ctx.inputs["audio"]
        await asyncio.sleep(self.delay_s)
        data = await ctx.read_artifact(ref)  # ArtifactNotFound would fail the item
        assert data == f"chunk {ref.meta['seq']:06d} ".encode() * 40
        SlowReader.read.append(ref.meta["seq"])


async def _sweep_repeatedly(data: Path, stop: asyncio.Event, reports: list[Any]) -> None:
    queue = SqliteQueue.in_dir(data)
    store = ArtifactStore(data)
    settings = GcSettings(grace_s=0.0)
    try:
        while not stop.is_set():
            reports.append(await sweep_artifacts(data, queue, store=store, settings=settings))
            await asyncio.sleep(0.005)
    finally:
        await queue.close()
        store.close()


async def test_a_sweep_with_no_grace_never_takes_a_chunk_a_slow_consumer_has_not_read(
    tmp_path: Path,
) -> None:
    count = 300
    flow = (
        FlowBuilder("behind")
        .add("src", ChunkSource, count=count)
        .add("slow", SlowReader, inputs={"audio": "src.audio"})
    )
    bus = EventBus(history=10_000)
    # A heartbeat every 100 ms moves the run's horizon on, so sweeps can collect
    # what the reader has finished with while the run goes on.
    settings = replace(FAST, lease_ms=300)
    session = FlowSession(flow.build(), tmp_path, settings=settings, bus=bus)
    stop = asyncio.Event()
    reports: list[Any] = []
    await session.start()
    sweeping = asyncio.create_task(_sweep_repeatedly(tmp_path, stop, reports))
    try:
        assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
    finally:
        stop.set()
        await sweeping
        await session.stop()

    assert SlowReader.read == list(range(count))
    assert len(reports) >= 5 and sum(r.deleted for r in reports) > count // 2
    assert not [e for e in bus.recent(0) if e.type in {"cascade_dropped", "cascade_retry"}]
    # Once everything is read only the state's latest chunk is left to keep.
    queue = SqliteQueue.in_dir(tmp_path)
    try:
        await sweep_artifacts(tmp_path, queue, settings=GcSettings(grace_s=0.0))
        latest = await queue.latest("behind")
    finally:
        await queue.close()
    with ArtifactStore(tmp_path) as store:
        left = [info.digest for info in store.iter_infos()]
    assert left == [latest[("src", "audio")]["$ref"]["digest"]]


class ClipSink(Node):
    inputs: ClassVar[Mapping[str, str]] = {"video": "video"}
    clips: ClassVar[list[MediaRef]] = []

    async def setup(self, ctx: Context) -> None:
        ClipSink.clips = []

    async def run(self, ctx: Context) -> None:
        ClipSink.clips.append(ctx.inputs["video"])


async def test_a_camera_and_recorder_under_a_small_cap_evict_the_oldest_clips_first(
    tmp_path: Path,
) -> None:
    camera = "lavfi:testsrc2=size=160x120:rate=10,trim=duration=9"
    flow = (
        FlowBuilder("capped")
        .add("cam", "camera", device=camera, fps=5, segment_s=1.0, realtime=True, video=True)
        .add("rec", "recorder", inputs={"video": "cam.video"}, clip_s=2)
        .add("sink", ClipSink, inputs={"video": "rec.video"})
    )
    bus = EventBus(history=100_000)
    # A lease a busy machine renews in time: one that lapses redelivers the recorder's
    # segments, and a clip saved again under its digest muddles the eviction order.
    session = FlowSession(flow.build(), tmp_path, settings=replace(FAST, lease_ms=1000), bus=bus)
    await session.start()
    # Frames are ~3 kB, segments ~10 kB and clips ~20 kB here; the newest of each,
    # and the segments the recorder holds, need ~60 kB that the cap may never take.
    cap = 120_000
    settings = GcSettings(interval_s=0, max_bytes=cap, cap_check_s=0.02)
    queue = SqliteQueue.in_dir(tmp_path)
    sweeper = Sweeper(tmp_path, queue, bus, settings)
    sweeper.start()
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, await asyncio.to_thread(sweeper.store.total_bytes))
            await asyncio.sleep(0.01)

    watching = asyncio.create_task(watch())
    try:
        assert await asyncio.wait_for(session.wait(until_idle=True), 90) == "idle"
    finally:
        await session.stop()  # the recorder's last, shorter clip is saved on the way out
        await sweeper.sweep_now(cap_only=True)
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        await sweeper.stop()

    clips = ClipSink.clips
    assert len(clips) >= 4
    evicted = [e.data for e in bus.recent(0) if e.type == "artifact_evicted"]
    assert evicted and {e["why"] for e in evicted} == {"cap"}
    clip_order = {ref.digest: index for index, ref in enumerate(clips)}
    evicted_clips = [clip_order[e["digest"]] for e in evicted if e["digest"] in clip_order]
    assert evicted_clips == sorted(evicted_clips) and evicted_clips[0] == 0  # oldest first
    with ArtifactStore(tmp_path) as store:
        assert store.total_bytes() <= cap
        assert store.exists(clips[-1])  # the latest clip is still servable
        latest = await queue.latest("capped")
        assert store.exists(latest[("cam", "image")]["$ref"]["digest"])  # and the latest frame
        assert store.exists(latest[("rec", "video")]["$ref"]["digest"])
    await queue.close()
    # Artifacts land whole, between checks 20 ms apart (later on a busy machine): the
    # store goes over by about a clip or two and what the camera writes meanwhile.
    assert peak <= cap + 2 * max(ref.size for ref in clips) + 15_000
