"""A flow whose data directory really fills up mid-run (``tests/small_fs.py``).

The flow: a paced counter, a node that saves ~100 KB per chunk and emits the
reference, and a node that reads each artifact back, checks its bytes and logs
the delivery to a file off the small filesystem. The saving node itself fills
the disk just before it saves chunk :data:`FILL_AT` (so no save is half-written
when it fills: a deterministic point of the run). Three ways it goes:

* only the artifacts (and the run records) are on the disk, the queue elsewhere:
  the saves fail with StoreFull, are retried and dead-lettered by the engine's
  rules, and once space returns the dead letters are requeued and every chunk is
  checked, exactly once;
* everything is on it, queue included: the queue reports ``queue_unavailable``
  (disk full), the work waits, and once space returns the flow completes;
* the run is stopped while the disk is full: the stop reports the failed commit,
  closes every file and leaves the run to be resumed; resumed by another process
  once space returns, it completes with nothing lost.

Nothing is mocked. Deliveries may repeat (the queue is at-least-once), but a
repeat is always marked as a redelivery, and every chunk is checked in the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from mediaflow import Context, FlowBuilder, FlowSession, MediaRef, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.events import Event, EventBus
from mediaflow.engine.state_store import RunRecord, StateStore
from mediaflow.queue import WorkQueue
from mediaflow.store import ArtifactStore
from tests.engine_nodes import Counter, read_deliveries
from tests.http_support import wait_until
from tests.small_fs import (
    SmallFs,
    fill,
    small_fs_fixture,  # noqa: F401 - the small_fs fixture
)
from tests.store_helpers import digest_of

FLOW = "filling"
COUNT = 30
FILL_AT = 5  # the saver fills the disk before saving this chunk
ARTIFACT_BYTES = 100 * 1024
# Quick retries, and a short lease so work that lost its claim comes back soon.
SETTINGS = EngineSettings(
    retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1, lease_ms=1000
)
ROOT = Path(__file__).resolve().parents[1]


def artifact_for(seq: int) -> bytes:
    return random.Random(seq).randbytes(ARTIFACT_BYTES)


class SaveEach(Node):
    """Saves ~100 KB per chunk, its bytes derived from the chunk's seq, and emits the
    reference. With ``fill_root``, fills that filesystem (once) just before saving
    chunk ``fill_at``."""

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}
    outputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    def __init__(self, fill_root: str = "", fill_at: int = -1) -> None:
        self.fill_root = fill_root
        self.fill_at = fill_at
        self._filled = False

    async def run(self, ctx: Context) -> None:
        seq = ctx.inputs["chunk"]["seq"]
        if seq == self.fill_at and self.fill_root and not self._filled:
            self._filled = True
            await asyncio.to_thread(fill, Path(self.fill_root))
        ref = await ctx.save_artifact(artifact_for(seq), "audio/wav", {"seq": seq})
        await ctx.emit("audio", ref)


class CheckEach(Node):
    """Reads each artifact back, checks its bytes and appends ``seq deliveries
    redelivery`` to ``log_file`` (one write per line: processes may share it)."""

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    def __init__(self, log_file: str) -> None:
        self.log_file = log_file

    async def run(self, ctx: Context) -> None:
        ref: MediaRef = ctx.inputs["audio"]
        seq = ref.meta["seq"]
        if await ctx.read_artifact(ref) != artifact_for(seq):
            raise ValueError(f"artifact of seq {seq} does not hold its bytes")
        assert ctx.item is not None
        line = f"{seq} {ctx.item.deliveries} {int(ctx.redelivery)}\n"
        fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def build(log_file: Path, *, period_s: float, fill_root: Path | None = None) -> FlowBuilder:
    """The flow: the source emits a chunk every ``period_s``; with ``fill_root``, the
    saver fills that filesystem just before saving chunk :data:`FILL_AT`."""
    fill_at = -1 if fill_root is None else FILL_AT
    return (
        FlowBuilder(FLOW)
        .add("src", Counter, count=COUNT, period_s=period_s)
        .add(
            "save",
            SaveEach,
            fill_root=str(fill_root or ""),
            fill_at=fill_at,
            inputs={"chunk": "src.chunk"},
        )
        .add("check", CheckEach, log_file=str(log_file), inputs={"audio": "save.audio"})
    )


# A source still emitting long after the disk filled (FILL_AT chunks in): its chunks
# need the queue while the disk is full.
SLOW_SOURCE_S = 0.02


def checked(log_file: Path) -> list[tuple[int, int, bool]]:
    return read_deliveries(log_file) if log_file.exists() else []


def assert_every_chunk_checked(log_file: Path, *, exactly_once: bool = False) -> None:
    """Every seq was checked; a seq checked again was a redelivery each time after."""
    deliveries = checked(log_file)
    seqs = [seq for seq, _, _ in deliveries]
    assert sorted(set(seqs)) == list(range(COUNT))
    if exactly_once:
        assert sorted(seqs) == list(range(COUNT))
    first_deliveries = [seq for seq, _, redelivery in deliveries if not redelivery]
    assert len(first_deliveries) == len(set(first_deliveries))


def assert_store_whole(data_dir: Path) -> None:
    """Each chunk's artifact is stored whole; files and rows agree; no temp file."""
    with ArtifactStore(data_dir) as store:
        for seq in range(COUNT):
            info = store.stat(digest_of(artifact_for(seq)))
            assert info is not None and info.saved_at is not None, f"seq {seq} not recorded"
            assert info.path.read_bytes() == artifact_for(seq)
        recorded = {info.digest for info in store.iter_infos()}
        placed = {
            "sha256:" + p.name
            for p in store.artifacts_dir.rglob("*")
            if p.is_file() and store.tmp_dir not in p.parents
        }
        assert placed == recorded and len(placed) == COUNT
        assert list(store.tmp_dir.iterdir()) == []


def last_run(data_dir: Path) -> RunRecord | None:
    runs = StateStore(data_dir)
    try:
        return runs.last_run(FLOW)
    finally:
        runs.close()


def events(bus: EventBus, kind: str) -> list[Event]:
    return [e for e in bus.recent(0) if e.type == kind]


async def run_to_idle(session: FlowSession, timeout: float = 20.0) -> None:
    assert await asyncio.wait_for(session.wait(until_idle=True), timeout) == "idle"


async def requeue_dead_letters(queue: WorkQueue) -> list[str]:
    """Requeue every dead letter of the flow; return their reasons."""
    letters = await queue.dead_letters(FLOW, limit=1000)
    for letter in letters:
        assert await queue.requeue_dead_letter(FLOW, letter.id) is not None
    return [letter.reason for letter in letters]


async def test_saves_that_fill_the_disk_are_dead_lettered_and_complete_when_space_returns(
    small_fs: SmallFs, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mediaflow.engine")
    data_dir = small_fs.data_dir()
    log_file = tmp_path / "checked.log"
    bus = EventBus(history=100_000)
    queue_url = f"sqlite://{tmp_path / 'queue.sqlite3'}"  # off the small filesystem
    flow = build(log_file, period_s=0.005, fill_root=small_fs.root).build()
    session = FlowSession(flow, data_dir, queue_url=queue_url, settings=SETTINGS, bus=bus)
    await session.start()
    try:
        # Full from chunk FILL_AT on: each later save fails, is retried, is dead-lettered.
        await run_to_idle(session)
        dropped = events(bus, "cascade_dropped")
        assert len(dropped) == COUNT - FILL_AT
        assert {e.data["attempts"] for e in dropped} == {SETTINGS.max_attempts}
        for event in dropped:
            reason = event.data["reason"]
            assert reason.startswith("StoreFull: [Errno 28] artifact store full"), reason
            assert str(data_dir / "artifacts") in reason
        letters = await session.queue.dead_letters(FLOW, limit=1000)
        assert sorted(letter.item.payload["value"]["seq"] for letter in letters) == list(
            range(FILL_AT, COUNT)
        )
        assert sorted(seq for seq, _, _ in checked(log_file)) == list(range(FILL_AT))
        assert events(bus, "queue_unavailable") == []  # the queue is on another disk
        # The run records are on the full disk too: the heartbeat fails, and says so.
        await wait_until(lambda: "could not record the run's heartbeat" in caplog.text)

        room_at = time.time()
        small_fs.make_room()
        await requeue_dead_letters(session.queue)
        await run_to_idle(session)

        assert await session.queue.dead_letters(FLOW) == []
        assert_every_chunk_checked(log_file, exactly_once=True)
        # The touch loop outlived the failed heartbeats: the run is on record as alive.
        await wait_until(
            lambda: (run := last_run(data_dir)) is not None and run.heartbeat_at > room_at
        )
    finally:
        small_fs.make_room()  # a failed test must not also fail to stop
        await session.stop()
    assert_store_whole(data_dir)
    run = last_run(data_dir)
    assert run is not None and run.outcome == "stopped"


async def test_a_full_disk_under_the_queue_holds_the_flow_until_space_returns(
    small_fs: SmallFs, tmp_path: Path
) -> None:
    data_dir = small_fs.data_dir()  # store, queue and run records
    log_file = tmp_path / "checked.log"
    bus = EventBus(history=100_000)
    flow = build(log_file, period_s=SLOW_SOURCE_S, fill_root=small_fs.root).build()
    session = FlowSession(flow, data_dir, settings=SETTINGS, bus=bus)
    await session.start()
    try:

        def queue_failed() -> bool:
            return any("disk full" in e.data["error"] for e in events(bus, "queue_unavailable"))

        def save_failed() -> bool:
            return any("StoreFull" in e.data["error"] for e in events(bus, "cascade_retry"))

        await wait_until(lambda: queue_failed() and save_failed())
        # The engine keeps running and holds the work back: nothing past the fill.
        assert await session.wait(for_s=0.3) == "time"
        assert {seq for seq, _, _ in checked(log_file)} <= set(range(FILL_AT))

        small_fs.make_room()
        await run_to_idle(session)
        # A dead letter that was written while the queue still had room is requeued.
        await requeue_dead_letters(session.queue)
        await run_to_idle(session)

        assert events(bus, "queue_available")
        assert_every_chunk_checked(log_file)
    finally:
        small_fs.make_room()  # a failed test must not also fail to stop
        await session.stop()
    assert_store_whole(data_dir)


STOP_WHEN_FULL = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from mediaflow import FlowSession
    from mediaflow.engine.events import EventBus
    from tests.small_fs import open_files_under
    from tests.test_full_disk_engine import SETTINGS, SLOW_SOURCE_S, build

    async def main(data_dir, log_file):
        bus = EventBus(history=100_000)
        data_dir = Path(data_dir)
        flow = build(Path(log_file), period_s=SLOW_SOURCE_S, fill_root=data_dir.parent)
        session = FlowSession(flow.build(), data_dir, settings=SETTINGS, bus=bus)
        await session.start()
        # The saver fills the disk; the queue then fails to take the source's chunks.
        for _ in range(1000):
            if any(e.type == "queue_unavailable" for e in bus.recent(0)):
                break
            await asyncio.sleep(0.01)
        else:
            sys.exit("the queue never reported the full disk")
        await asyncio.sleep(0.3)  # more of the source's chunks wait for the queue
        try:
            await session.stop()
            stopped = "cleanly"
        except Exception as exc:
            stopped = f"{type(exc).__name__}: {exc}"
        current = asyncio.current_task()
        left = [repr(t.get_coro()) for t in asyncio.all_tasks() if t is not current]
        opened = open_files_under(data_dir)
        print(json.dumps({"stopped": stopped, "open": opened, "tasks": left}))

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_a_run_stopped_on_a_full_disk_resumes_with_nothing_lost(
    small_fs: SmallFs, tmp_path: Path
) -> None:
    data_dir = small_fs.data_dir()
    log_file = tmp_path / "checked.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, sys.path)])}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        STOP_WHEN_FULL,
        str(data_dir),
        str(log_file),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(child.communicate(), 30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
    assert child.returncode == 0, err.decode()
    report = json.loads(out.decode().splitlines()[-1])
    # The last commit could not be written: the stop says so, and closed every file.
    assert report["stopped"].startswith("QueueUnavailable: ") and "disk full" in report["stopped"]
    assert report["open"] == [] and report["tasks"] == []
    assert small_fs.free_bytes() == 0

    small_fs.make_room()
    run = last_run(data_dir)
    assert run is not None and not run.ended  # left to be resumed

    flow = build(log_file, period_s=SLOW_SOURCE_S).build()  # no filling this time
    session = FlowSession(flow, data_dir, settings=SETTINGS)
    await session.start()
    try:
        assert session.resumed
        await run_to_idle(session)
        await requeue_dead_letters(session.queue)
        await run_to_idle(session)
    finally:
        await session.stop()
    assert_every_chunk_checked(log_file)
    assert_store_whole(data_dir)
