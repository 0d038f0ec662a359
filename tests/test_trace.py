"""Recorded runs replay exactly: ``MEDIAFLOW_TRACE`` on real runs, then the reducer
alone rebuilds every decision (a slow consumer, retries and dead letters, pause and
step, a SIGKILL and the resumed run), and ``mediaflow trace`` tells them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from mediaflow import FlowBuilder, FlowSession
from mediaflow.config import EngineSettings
from mediaflow.engine.replay import replay
from mediaflow.engine.state import is_idle
from mediaflow.engine.ticks import ClaimedTick, CommittedTick, ItemsArrivedTick
from mediaflow.engine.trace import Segment, read_segments
from tests.crash_helpers import DrainFlow
from tests.engine_nodes import Counter, Flaky, Recorder, read_deliveries

REPO = Path(__file__).resolve().parent.parent
FAST = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)


def commands_of(segment: Segment, kind: str) -> list[dict[str, object]]:
    return [c for line in segment.lines for c in line.commands if c["type"] == kind]


def acked(segment: Segment) -> list[str]:
    return [i for c in commands_of(segment, "ack") for i in c["ids"]]  # type: ignore[attr-defined]


Arrival = type[ClaimedTick] | type[CommittedTick] | type[ItemsArrivedTick]


def delivered(segment: Segment, kind: Arrival) -> list[tuple[str, int, int]]:
    """(node, seq, deliveries) of the items that arrived through ticks of ``kind``."""
    return [
        (i.stream.node, i.seq, i.deliveries)
        for line in segment.lines
        if isinstance(line.tick, kind)
        for i in line.tick.items
    ]


async def _run(flow: FlowBuilder, data: Path, settings: EngineSettings = FAST) -> FlowSession:
    session = FlowSession(flow.build(), data, settings=settings)
    await session.start()
    try:
        assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
    finally:
        await session.stop()
    return session


async def test_a_slow_consumer_paused_and_stepped_replays_exactly(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    flow = (
        FlowBuilder("slow")
        .add("src", Counter, count=400, period_s=0.002)
        .add("sink", Recorder, delay_s=0.001, inputs={"chunk": "src.chunk"})
    )
    settings = EngineSettings(node_buffer=8, backlog_interval_s=0.1, trace_path=trace)
    session = FlowSession(flow.build(), tmp_path / "data", settings=settings)
    await session.start()
    try:
        while len(Recorder.seen.get("sink", ())) < 20:  # flowing: claimed at enqueue
            await asyncio.sleep(0.01)
        await session.pause()  # then the chunks wait on disk, claimed later
        await asyncio.sleep(0.2)
        for _ in range(3):
            await session.step()
            await asyncio.sleep(0.05)
        await session.resume()
        assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
    finally:
        await session.stop()
    assert Recorder.seen["sink"] == list(range(400))

    (segment,) = read_segments(trace)
    result = replay(segment)
    assert result.exact, result.mismatch
    assert result.ticks == len(segment.lines) > 0 and result.commands > 400 / 64
    assert is_idle(result.state) and result.state.stopping  # the run's end, rebuilt
    # Both hand-offs were exercised: claimed at enqueue, and claimed from disk.
    assert delivered(segment, CommittedTick) and delivered(segment, ClaimedTick)
    sink = sorted(seq for node, seq, _ in delivered(segment, CommittedTick)
                  + delivered(segment, ClaimedTick) if node == "sink")  # fmt: skip
    assert sink == list(range(1, 401))  # every item (queue seq) arrived once, through a tick
    assert len(acked(segment)) == 401  # and was acked (the source's item too)
    assert {"pause", "step", "resume"} <= {line.tick.type for line in segment.lines}


async def test_retries_and_dead_letters_replay_exactly(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    flow = (
        FlowBuilder("flaky")
        .add("src", Counter, count=6)
        .add("f", Flaky, bad=[2, 4], failures=10, inputs={"chunk": "src.chunk"})
    )
    await _run(flow, tmp_path / "data", replace(FAST, trace_path=trace))
    (segment,) = read_segments(trace)
    result = replay(segment)
    assert result.exact, result.mismatch
    dead = commands_of(segment, "dead_letter")
    assert len(dead) == 2 and all("flaky on seq" in str(d["reason"]) for d in dead)
    retries = [c for c in commands_of(segment, "publish") if c["event"] == "cascade_retry"]
    assert len(retries) == 4
    waits = commands_of(segment, "wake_at")
    assert len(waits) == 4 and any(line.tick.type == "timer" for line in segment.lines)


def test_a_killed_run_and_its_resumption_replay_exactly(tmp_path: Path) -> None:
    """SIGKILL mid-drain, then resume: two segments, each replays exactly; the second
    starts careful and holds the redelivered items."""
    count = 1500
    trace = tmp_path / "trace.jsonl"
    drain = DrainFlow.write(tmp_path, count)
    drain.run_and_kill(env={"MEDIAFLOW_TRACE": str(trace)})
    env = {**os.environ, "MEDIAFLOW_TRACE": str(trace)}
    again = subprocess.run(
        drain.command(), cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert sorted({seq for seq, _, _ in read_deliveries(drain.log_file)}) == list(range(count))

    first, second = read_segments(trace)
    for segment in (first, second):
        result = replay(segment)
        assert result.exact, result.mismatch
    assert not first.start.careful and first.header["careful"] == []
    assert second.header["careful"] == [["drain", "sink"]]  # resumed: drains carefully
    redelivered = [d for node, _, d in delivered(second, ClaimedTick) if node == "sink"]
    assert redelivered and max(redelivered) > 1
    assert not delivered(second, ItemsArrivedTick)  # the source was not started again
    starts = commands_of(second, "start_node")
    assert any(s.get("commit_first") for s in starts)  # acks made durable before each

    shown = subprocess.run(
        [sys.executable, "-m", "mediaflow", "trace", str(trace)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "segment 2:" in shown.stdout and "resumed after a crash" in shown.stdout
    assert shown.stdout.count("commands reproduced") == 2


def test_mediaflow_trace_reports_a_decision_that_does_not_replay(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    env = {**os.environ, "MEDIAFLOW_TRACE": str(trace)}
    result = subprocess.run(
        [sys.executable, "-m", "mediaflow", "run", "samples/levels.toml", "--until-idle",
         "--data", str(tmp_path / "data")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = trace.read_text().splitlines()
    tampered = []
    done = False
    for line in lines:
        raw = json.loads(line)
        for command in raw.get("commands", ()):
            if command["type"] == "ack" and not done:
                command["ids"] = [*command["ids"][:-1], "999"]  # a decision it never made
                done = True
        tampered.append(json.dumps(raw))
    assert done
    bad = tmp_path / "tampered.jsonl"
    bad.write_text("\n".join(tampered) + "\n")

    def trace_cmd(path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mediaflow", "trace", str(path), *flags],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )

    good = trace_cmd(trace, "--node", "meter")
    assert good.returncode == 0 and "start meter" in good.stdout
    assert "start tone" not in good.stdout  # --node filters what is printed
    differs = trace_cmd(bad, "--check")
    assert differs.returncode == 1 and "replay differs at tick" in differs.stdout
    assert "999" in differs.stdout
    missing = trace_cmd(tmp_path / "nope.jsonl")
    assert missing.returncode == 2 and "nope.jsonl" in missing.stderr
