"""What the engine tells garbage collection: run records with horizons, the pins
behind a runner's horizon, keeps and holds, and references committed with the
acks of the items that forwarded them."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

import mediaflow
from mediaflow import Context, FlowBuilder, FlowSession, MediaRef, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.context import HOLD_S
from mediaflow.engine.pins import STALE_PIN_S, Pins
from mediaflow.engine.state_store import RunRecord, StateStore
from mediaflow.queue import SqliteQueue, WorkItem
from mediaflow.queue.contract import EmissionRun, NewItem, StreamKey
from mediaflow.store import ArtifactStore, current_store

FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)
DAY = 86400.0


# -- run records -----------------------------------------------------------------


@pytest.fixture
def state(tmp_path: Path) -> Iterator[StateStore]:
    store = StateStore(tmp_path)
    yield store
    store.close()


def test_a_run_starts_with_its_start_as_horizon(state: StateStore) -> None:
    record = state.start_run("r1", "cam", "host:1:x")
    assert record.horizon == record.started_at
    assert state.last_run("cam") == record


def test_a_heartbeat_writes_the_horizon_given_or_now(state: StateStore) -> None:
    state.start_run("r1", "cam", "host:1:x")
    before = time.time()
    state.heartbeat("r1", horizon=before - 30)
    record = state.last_run("cam")
    assert record is not None and record.horizon == before - 30
    assert record.heartbeat_at >= before

    state.heartbeat("r1")
    record = state.last_run("cam")
    assert record is not None and record.horizon == record.heartbeat_at >= before


def test_adopting_a_crashed_run_starts_its_horizon_again(state: StateStore) -> None:
    state.start_run("r1", "cam", "host:1:x")
    state.heartbeat("r1", horizon=1.0)
    before = time.time()
    state.adopt_run("r1", "host:2:y")
    record = state.last_run("cam")
    assert record is not None and record.owner == "host:2:y"
    assert record.horizon is not None and record.horizon >= before


def test_open_runs_are_those_not_ended(state: StateStore) -> None:
    state.start_run("a", "cam", "o")
    state.start_run("b", "mic", "o")
    state.start_run("c", "cam", "o")
    state.end_run("a", "stopped")

    assert [r.run_id for r in state.open_runs()] == ["b", "c"]
    assert all(not r.ended for r in state.open_runs())


def test_an_older_file_gains_the_horizon_column(tmp_path: Path) -> None:
    old = sqlite3.connect(tmp_path / "state.sqlite3")
    old.executescript(
        """
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY, flow TEXT NOT NULL, owner TEXT NOT NULL,
            started_at REAL NOT NULL, heartbeat_at REAL NOT NULL,
            ended_at REAL, outcome TEXT
        );
        INSERT INTO runs VALUES ('old', 'cam', 'o', 1.0, 2.0, NULL, NULL);
        """
    )
    old.close()

    state = StateStore(tmp_path)
    again = StateStore(tmp_path)  # a second opener finds the column there
    try:
        record = state.last_run("cam")
        assert record is not None and record.run_id == "old" and record.horizon is None
        state.heartbeat("old", horizon=5.0)
        assert [r.horizon for r in again.open_runs()] == [5.0]
    finally:
        state.close()
        again.close()


def test_the_state_file_limits_its_wal(state: StateStore) -> None:
    limit = state._db.execute("PRAGMA journal_size_limit").fetchone()[0]
    assert 0 < limit <= 16 * 1024 * 1024


def _runs(state: StateStore, flow: str, ends: Sequence[float | None]) -> None:
    """Runs of ``flow`` started in this order, ended at ``ends`` (None: open)."""
    for index, ended in enumerate(ends):
        run_id = f"{flow}{index}"
        state.start_run(run_id, flow, "o")
        if ended is not None:
            state._db.execute(
                "UPDATE runs SET started_at=?, ended_at=? WHERE run_id=?",
                (float(index), ended, run_id),
            )
        else:
            state._db.execute("UPDATE runs SET started_at=? WHERE run_id=?", (float(index), run_id))
    state._db.commit()


@pytest.mark.parametrize(
    ("ends", "ended_before", "keep", "left"),
    [
        # all ended long ago: the newest `keep` stay
        ([1, 2, 3, 4, 5], 100, 2, ["f3", "f4"]),
        # only those ended before the cutoff go
        ([1, 2, 30, 40, 50], 10, 1, ["f2", "f3", "f4"]),
        # an open run is never deleted, and counts among the newest
        ([None, 2, 3, 4, None], 100, 2, ["f0", "f3", "f4"]),
        ([1, 2, 3], 100, 5, ["f0", "f1", "f2"]),
    ],
)
def test_prune_runs(
    state: StateStore,
    ends: list[float | None],
    ended_before: float,
    keep: int,
    left: list[str],
) -> None:
    _runs(state, "f", ends)
    _runs(state, "g", [1, 2, 3])

    pruned = state.prune_runs(ended_before=ended_before, keep_per_flow=keep)

    remaining = [r for (r,) in state._db.execute("SELECT run_id FROM runs ORDER BY run_id")]
    assert [r for r in remaining if r.startswith("f")] == left
    assert pruned == len(ends) - len(left) + (3 - sum(r.startswith("g") for r in remaining))
    assert state.last_run("f") is not None


def test_prune_runs_keeps_at_least_the_newest(state: StateStore) -> None:
    with pytest.raises(ValueError, match="keep_per_flow"):
        state.prune_runs(ended_before=time.time(), keep_per_flow=0)


def test_forget_flow_deletes_its_ended_runs_only(state: StateStore) -> None:
    _runs(state, "f", [1, 2, None])
    _runs(state, "g", [1])

    assert state.forget_flow("f") == 2
    assert [r.run_id for r in state.open_runs()] == ["f2"]
    assert state.last_run("g") is not None


# -- pins ------------------------------------------------------------------------


def test_pins_horizon_is_the_earliest_save_still_held() -> None:
    pins = Pins()
    first: dict[str, Any] = {}
    second: dict[str, Any] = {}
    assert pins.horizon(100.0) == 100.0

    pins.take(first, "d1", 10.0, 11.0)
    pins.take(first, "d2", 20.0, 21.0)
    pins.take(second, "d1", 5.0, 30.0)  # the same bytes saved by another run, earlier
    pins.take(first, "d1", 1.0, 40.0)  # a run pins a digest once
    assert pins.horizon(100.0) == 5.0

    pins.release_all(second)
    assert pins.horizon(100.0) == 5.0  # d1 is still held by the first run
    pins.release(first, "d1")
    assert pins.horizon(100.0) == 20.0
    pins.release(first, "d1")  # twice is harmless
    pins.release_all(first)
    assert pins.horizon(100.0) == 100.0
    assert len(pins) == 0


def test_a_running_save_counts_from_its_start() -> None:
    pins = Pins()
    held: dict[str, Any] = {}
    token = pins.saving(10.0)
    assert pins.horizon(100.0) == 10.0  # the store may have recorded it already
    assert pins.horizon(10.0 + STALE_PIN_S * 2) == 10.0  # and it is never stale
    pins.saved(token)
    assert pins.horizon(100.0) == 100.0
    pins.take(held, "d", 10.0, 50.0)
    assert pins.horizon(100.0) == 10.0


def test_a_stale_pin_is_dropped_and_never_releases_a_newer_one() -> None:
    pins = Pins()
    old_run: dict[str, Any] = {}
    new_run: dict[str, Any] = {}
    pins.take(old_run, "d", 0.0, 0.0)
    later = STALE_PIN_S + 1
    assert pins.horizon(STALE_PIN_S - 1) == 0.0  # held for under the limit: it stays

    assert pins.horizon(later) == later  # held for over an hour: dropped, logged
    pins.take(new_run, "d", STALE_PIN_S, STALE_PIN_S)
    pins.release_all(old_run)  # the stale holder lets go: the new pin stays
    assert pins.horizon(later) == STALE_PIN_S


def test_a_long_save_is_pinned_from_when_it_returned() -> None:
    pins = Pins()
    held: dict[str, Any] = {}
    pins.take(held, "d", 0.0, STALE_PIN_S * 3)  # a save that streamed for hours
    assert pins.horizon(STALE_PIN_S * 3 + 1) == 0.0


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

    def __init__(self, then: Sequence[str] = ()) -> None:
        self.then = list(then)

    async def run(self, ctx: Context) -> None:
        for index, action in enumerate(self.then):
            before = time.time()
            ref = await ctx.save_artifact(f"frame {index}".encode(), "image/jpeg")
            SavingSource.saving.append((before, time.time()))
            SavingSource.refs.append(ref)
            await SavingSource.gate.pause()  # saved, not yet emitted
            if action == "emit":
                await ctx.emit("image", ref)
                await ctx.flush()
            elif action == "keep":
                ctx.keep(ref)
            elif action == "hold":
                ctx.hold(ref)
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
        await runner.heartbeat()  # the heartbeat records it
        record = _last_run(tmp_path, "pinning")
        assert record is not None and record.horizon == horizon

        await _step(gate)  # emitted and committed, kept, or held
        before = time.time()
        assert runner.horizon() >= before
        await runner.heartbeat()
        record = _last_run(tmp_path, "pinning")
        assert record is not None and record.horizon is not None and record.horizon >= before
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
        ctx.hold(ref)
        self.held.append(ref)
        if len(self.held) >= self.window:
            for old in self.held:
                ctx.unhold(old)
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

    async def enqueue(
        self,
        items: Sequence[NewItem],
        *,
        claim_for: str | None = None,
        ack: Sequence[str] = (),
        latest: Mapping[tuple[str, str, str], Any] | None = None,
    ) -> list[WorkItem]:
        stored = await super().enqueue(items, claim_for=claim_for, ack=ack, latest=latest)
        self.stored.extend(stored)
        if ack or latest:
            self.commits.append((list(ack), dict(latest or {})))
        return stored

    async def commit(
        self,
        runs: Sequence[EmissionRun],
        *,
        claim_for: str | None = None,
        ack: Sequence[str] = (),
        latest: Mapping[tuple[str, str, str], Any] | None = None,
    ) -> list[WorkItem]:
        claimed = await super().commit(runs, claim_for=claim_for, ack=ack, latest=latest)
        self.stored.extend(claimed)
        if ack or latest:
            self.commits.append((list(ack), dict(latest or {})))
        return claimed

    async def claim(
        self, consumer: str, wants: Mapping[StreamKey, int], *, block_ms: int = 0
    ) -> list[WorkItem]:
        claimed = await super().claim(consumer, wants, block_ms=block_ms)
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
