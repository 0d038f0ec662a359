"""What the engine tells garbage collection while flows run: a runner's horizon
follows the references it saved and has not yet emitted, kept and held references
are recorded, and references are committed with the acks of the items that
forwarded them.

Run records and pins on their own: ``tests/test_gc_engine_records.py``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

import mediaflow
from mediaflow import Context, FlowBuilder, FlowSession, MediaRef, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.context import HOLD_S
from mediaflow.engine.state_store import RunRecord, StateStore
from mediaflow.gc import GcSettings, sweep_artifacts
from mediaflow.queue import SqliteQueue, WorkItem
from mediaflow.queue.contract import EmissionRun, NewItem, StreamKey
from mediaflow.store import ArtifactStore, current_store

FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)
DAY = 86400.0

# -- a runner's horizon in real flows ----------------------------------------------


class Gate:
    """Lets a test step a node: ``reached`` is set at the node's pause, ``go`` resumes
    it; once :meth:`open`, pauses no longer wait."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.go = asyncio.Event()
        self.opened = False

    async def pause(self) -> None:
        if self.opened:
            return
        self.reached.set()
        await self.go.wait()
        self.go.clear()

    def open(self) -> None:
        self.opened = True
        self.go.set()


class SavingSource(Node):
    """Saves one artifact per step; then emits it, keeps it, holds it or drops it."""

    outputs: ClassVar[Mapping[str, str]] = {"image": "image"}
    gate: ClassVar[Gate]
    refs: ClassVar[list[MediaRef]] = []
    saving: ClassVar[list[tuple[float, float]]] = []  # (before, after) each save

    def __init__(self, then: Sequence[str] = (), module: bool = False) -> None:
        self.then = list(then)
        self.module = module  # save with the module-level mediaflow.save_artifact

    async def run(self, ctx: Context) -> None:
        save = mediaflow.save_artifact if self.module else ctx.save_artifact
        for index, action in enumerate(self.then):
            before = time.time()
            ref = await save(f"frame {index}".encode(), "image/jpeg")
            SavingSource.saving.append((before, time.time()))
            SavingSource.refs.append(ref)
            await SavingSource.gate.pause()  # saved, not yet emitted
            if action == "emit":
                await ctx.emit("image", ref)
                await ctx.more.flush()
            elif action == "keep":
                ctx.more.keep(ref)
            elif action == "hold":
                ctx.more.hold(ref)
            await SavingSource.gate.pause()  # after the action
        await SavingSource.gate.pause()  # the run is about to end


class Forwarder(Node):
    """Forwards the reference it reads to a port nobody reads."""

    inputs: ClassVar[Mapping[str, str]] = {"image": "image"}
    outputs: ClassVar[Mapping[str, str]] = {"out": "image"}

    async def run(self, ctx: Context) -> dict[str, Any]:
        return {"out": ctx.inputs["image"]}


def _last_run(data: Path, flow: str) -> RunRecord | None:
    store = StateStore(data)
    try:
        return store.last_run(flow)
    finally:
        store.close()


async def _start(flow: FlowBuilder, data: Path, **session: Any) -> FlowSession:
    started = FlowSession(flow.build(), data, settings=FAST, **session)
    await started.start()
    return started


async def _step(gate: Gate) -> None:
    gate.go.set()
    gate.reached.clear()
    await asyncio.wait_for(gate.reached.wait(), 10)


@pytest.mark.parametrize("action", ["emit", "keep", "hold"])
async def test_a_saved_reference_holds_the_horizon_until_emitted(
    tmp_path: Path, action: str
) -> None:
    SavingSource.gate = gate = Gate()
    SavingSource.refs, SavingSource.saving = [], []
    flow = FlowBuilder("pinning").add("src", SavingSource, then=[action])
    session = await _start(flow, tmp_path)
    runner = session.runner
    assert runner is not None
    try:
        await asyncio.wait_for(gate.reached.wait(), 10)  # saved, not yet emitted
        before, after = SavingSource.saving[0]
        horizon = runner.horizon()
        assert before <= horizon <= after  # when the save started
        await runner.heartbeat.beat()  # the heartbeat records it
        record = _last_run(tmp_path, "pinning")
        assert record is not None and record.horizon == horizon

        await _step(gate)  # emitted and committed, kept, or held
        before = time.time()
        assert runner.horizon() >= before
        await runner.heartbeat.beat()
        record = _last_run(tmp_path, "pinning")
        assert record is not None and record.horizon is not None and record.horizon >= before
    finally:
        gate.open()
        await session.stop()


@pytest.mark.parametrize("module", [False, True], ids=["ctx", "module"])
async def test_a_saved_reference_not_yet_emitted_survives_a_sweep(
    tmp_path: Path, module: bool
) -> None:
    SavingSource.gate = gate = Gate()
    SavingSource.refs, SavingSource.saving = [], []
    flow = FlowBuilder("sparing").add("src", SavingSource, then=["emit"], module=module)
    session = await _start(flow, tmp_path)
    runner = session.runner
    assert runner is not None
    try:
        await asyncio.wait_for(gate.reached.wait(), 10)  # saved, not yet emitted
        await runner.heartbeat.beat()  # the run's horizon, recorded for the sweep
        queue = SqliteQueue.in_dir(tmp_path)
        store = ArtifactStore(tmp_path)
        try:
            await sweep_artifacts(tmp_path, queue, store=store, settings=GcSettings(grace_s=0.0))
            assert store.exists(SavingSource.refs[0])
        finally:
            await queue.close()
            store.close()
        await _step(gate)  # emitted and committed
    finally:
        gate.open()
        await session.stop()


async def test_a_reference_the_run_drops_is_let_go_when_the_run_ends(tmp_path: Path) -> None:
    SavingSource.gate = gate = Gate()
    SavingSource.refs, SavingSource.saving = [], []
    flow = FlowBuilder("dropping").add("src", SavingSource, then=["drop"])
    session = await _start(flow, tmp_path)
    runner = session.runner
    assert runner is not None
    try:
        await asyncio.wait_for(gate.reached.wait(), 10)
        await _step(gate)  # did nothing with it: still pinned while the run lasts
        before, after = SavingSource.saving[0]
        assert before <= runner.horizon() <= after
        gate.open()  # the source's run ends
        for _ in range(200):
            if not runner.pinned():
                break
            await asyncio.sleep(0.01)
        assert runner.horizon() > after and not runner.pinned()
    finally:
        gate.open()
        await session.stop()


def _keeps(data: Path) -> dict[str, tuple[str, float | None]]:
    with sqlite3.connect(data / "store.sqlite3") as db:
        rows = db.execute("SELECT digest, kind, expires_at FROM run_artifact").fetchall()
    return {digest: (kind, expires) for digest, kind, expires in rows}


@pytest.mark.parametrize(("retention_days", "expires_in"), [(None, None), (7, 7 * DAY)])
async def test_keep_records_a_recording_for_the_flows_retention(
    tmp_path: Path, retention_days: float | None, expires_in: float | None
) -> None:
    SavingSource.gate = gate = Gate()
    SavingSource.refs, SavingSource.saving = [], []
    flow = FlowBuilder("keeping", retention_days=retention_days)
    session = await _start(flow.add("src", SavingSource, then=["keep"]), tmp_path)
    try:
        await asyncio.wait_for(gate.reached.wait(), 10)
        before = time.time()
        await _step(gate)
        kind, expires = _keeps(tmp_path)[SavingSource.refs[0].digest]
        assert kind == "recording"
        if expires_in is None:
            assert expires is None
        else:
            assert (
                expires is not None and before + expires_in <= expires <= time.time() + expires_in
            )
    finally:
        gate.open()
        await session.stop()


class Holder(Node):
    """Holds every reference it reads until it has seen ``window`` of them."""

    inputs: ClassVar[Mapping[str, str]] = {"image": "image"}
    released: ClassVar[list[str]] = []

    def __init__(self, window: int = 2) -> None:
        self.window = window
        self.held: list[MediaRef] = []

    async def run(self, ctx: Context) -> None:
        ref = ctx.inputs["image"]
        ctx.more.hold(ref)
        self.held.append(ref)
        if len(self.held) >= self.window:
            for old in self.held:
                ctx.more.unhold(old)
                Holder.released.append(old.digest)
            self.held = []


async def test_hold_and_unhold_a_reference_beyond_its_item(tmp_path: Path) -> None:
    SavingSource.gate = gate = Gate()
    SavingSource.refs, SavingSource.saving = [], []
    Holder.released = []
    flow = (
        FlowBuilder("holding")
        .add("src", SavingSource, then=["emit", "emit", "emit"])
        .add("hold", Holder, window=2, inputs={"image": "src.image"})
    )
    session = await _start(flow, tmp_path)
    runner = session.runner
    assert runner is not None
    try:
        await asyncio.wait_for(gate.reached.wait(), 10)
        await _step(gate)  # first frame emitted, committed
        await _step(gate)
        await _step(gate)  # second frame emitted
        first, second = SavingSource.refs[:2]
        for _ in range(200):
            if Holder.released:
                break
            await asyncio.sleep(0.01)
        assert Holder.released == [first.digest, second.digest]
        assert first.digest not in _keeps(tmp_path) and second.digest not in _keeps(tmp_path)
        await _step(gate)
        await _step(gate)  # third frame emitted: held, its item acked
        third = SavingSource.refs[2]
        for _ in range(200):
            if third.digest in _keeps(tmp_path) and not runner.has_unflushed():
                break
            await asyncio.sleep(0.01)
        kind, expires = _keeps(tmp_path)[third.digest]
        assert kind == "hold"
        assert expires is not None and expires == pytest.approx(time.time() + HOLD_S, abs=60)
    finally:
        gate.open()
        await session.stop()


# -- a forwarded reference is committed with the ack of its input -------------------


class SpyQueue(SqliteQueue):
    """Records, per commit, the items it acked and the latest values it wrote."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.commits: list[tuple[list[str], dict[tuple[str, str, str], Any]]] = []
        self.stored: list[WorkItem] = []  # every item handed to a consumer
        self.lazy: list[dict[tuple[str, str, str], Any]] = []  # put_latest alone

    async def commit(
        self,
        batch: Sequence[EmissionRun | NewItem],
        *,
        claim_for: str | None = None,
        ack: Sequence[str] = (),
        latest: Mapping[tuple[str, str, str], Any] | None = None,
    ) -> list[WorkItem]:
        claimed = await super().commit(batch, claim_for=claim_for, ack=ack, latest=latest)
        self.stored.extend(claimed)
        if ack or latest:
            self.commits.append((list(ack), dict(latest or {})))
        return claimed

    async def claim(self, consumer: str, wants: Mapping[StreamKey, int]) -> list[WorkItem]:
        claimed = await super().claim(consumer, wants)
        self.stored.extend(claimed)
        return claimed

    async def ack(self, entry_ids: Sequence[str]) -> int:
        self.commits.append((list(entry_ids), {}))
        return await super().ack(entry_ids)

    async def put_latest(self, latest: Mapping[tuple[str, str, str], Any]) -> None:
        self.commits.append(([], dict(latest)))
        self.lazy.append(dict(latest))
        await super().put_latest(latest)


async def test_a_reference_forwarded_to_an_unread_port_lands_with_the_ack(
    tmp_path: Path,
) -> None:
    SavingSource.gate = gate = Gate()
    SavingSource.refs, SavingSource.saving = [], []
    queue = SpyQueue(tmp_path / "queue.sqlite3")
    flow = (
        FlowBuilder("forwarding")
        .add("src", SavingSource, then=["emit"] * 5)
        .add("fwd", Forwarder, inputs={"image": "src.image"})
    )
    session = await _start(flow, tmp_path, queue=queue)
    runner = session.runner
    assert runner is not None
    try:
        await asyncio.wait_for(gate.reached.wait(), 10)
        for _ in range(2 * 5):
            await _step(gate)
        for _ in range(200):
            if not runner.has_unflushed() and len(queue.stored) >= 5 and not runner.pinned():
                break
            await asyncio.sleep(0.01)
        # Never left to the lazy flush of latest values: it rides with the acks.
        assert all(("forwarding", "fwd", "out") not in latest for latest in queue.lazy)
    finally:
        gate.open()
        await session.stop()

    key = ("forwarding", "fwd", "out")
    forwarded = {
        item.entry_id: item.payload["value"]["$ref"]["digest"]
        for item in queue.stored
        if item.stream.node == "fwd"
    }
    assert len(forwarded) == 5
    committed: set[str] = set()
    for acks, latest in queue.commits:
        if key in latest:
            committed.add(latest[key]["$ref"]["digest"])
        for entry in acks:
            if entry in forwarded:
                # The forwarded reference is durable no later than its input's ack.
                assert forwarded[entry] in committed


class ModuleSaver(Node):
    """Saves with the module-level ``mediaflow.save_artifact``, in the task and in a thread."""

    outputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    async def run(self, ctx: Context) -> None:
        ref = await mediaflow.save_artifact(b"saved with the module function", "audio/wav")
        await ctx.emit("audio", ref)
        threaded = await asyncio.to_thread(
            lambda: current_store().save_sync(b"and from a thread", "audio/wav")
        )
        await ctx.emit("audio", threaded)


async def test_the_module_save_artifact_saves_into_the_flows_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDIAFLOW_DATA", str(tmp_path / "elsewhere"))
    flow = FlowBuilder("module-save").add("src", ModuleSaver)
    async with FlowSession(flow.build(), tmp_path / "flow") as session:
        assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
    with ArtifactStore(tmp_path / "flow") as store:
        assert store.total_bytes() == len(b"saved with the module function") + len(
            b"and from a thread"
        )
    assert not (tmp_path / "elsewhere").exists()
