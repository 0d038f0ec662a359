"""A flow that runs on and on holds about what it held early on: artifacts, queue, WAL,
dead letters and run records all stay bounded once sweeps run."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.state_store import StateStore
from mediaflow.gc import GcSettings, sweep_artifacts
from mediaflow.queue.sqlite import SqliteQueue

FAST = EngineSettings(retry_base_s=0.001, retry_max_s=0.002, backlog_interval_s=0.1)
SWEEP = GcSettings(grace_s=0.0, dead_letter_keep=5, run_record_days=0.0, run_record_keep=2)


class Frames(Node):
    """Saves and emits ``count`` distinct 2 kB chunks, numbered on from the last run."""

    outputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    def __init__(self, count: int = 150, start: int = 0) -> None:
        self.count = count
        self.start = start

    async def run(self, ctx: Context) -> None:
        for seq in range(self.start, self.start + self.count):
            data = seq.to_bytes(8, "big") * 256
            await ctx.emit("audio", await ctx.save_artifact(data, "audio/wav", {"seq": seq}))


class Picky(Node):
    """Reads every chunk and fails for good on every 50th: those become dead letters."""

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    async def run(self, ctx: Context) -> None:
        ref = ctx.inputs["audio"]
        await ctx.read_artifact(ref)
        if ref.meta["seq"] % 50 == 0:
            raise ValueError(f"chunk {ref.meta['seq']} is refused")


def disk_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in data.rglob("*") if p.is_file())


async def run_once(data: Path, phase: int) -> None:
    flow = (
        FlowBuilder("long")
        .add("src", Frames, count=150, start=phase * 150)
        .add("picky", Picky, inputs={"audio": "src.audio"})
    )
    async with FlowSession(flow.build(), data, settings=FAST) as session:
        assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
    queue = SqliteQueue.in_dir(data)
    try:
        await sweep_artifacts(data, queue, settings=SWEEP)
    finally:
        await queue.close()


async def test_six_runs_hold_about_what_two_held(tmp_path: Path) -> None:
    sizes = []
    for phase in range(6):
        await run_once(tmp_path, phase)
        sizes.append(disk_bytes(tmp_path))

    # 900 chunks (1.8 MB) went through; after the sweeps the directory holds what
    # it held after the second run, give or take SQLite's page reuse.
    assert sizes[-1] <= sizes[1] * 1.25, sizes
    queue = SqliteQueue.in_dir(tmp_path)
    try:
        assert len(await queue.dead_letters("long", limit=1000)) == 5
    finally:
        await queue.close()
    state = StateStore(tmp_path)
    try:
        assert len(state.open_runs()) == 0
        runs = state._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        state.close()
    assert runs == 2
