"""``mediaflow run`` as a user runs it: real subprocesses, real files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.crash_helpers import DrainFlow
from tests.engine_nodes import read_deliveries

REPO = Path(__file__).resolve().parent.parent
FLOWS = Path(__file__).resolve().parent / "flows"


def mediaflow(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mediaflow", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


BAD_FLOWS = [
    # (file, fragments the one-line message must contain)
    ("syntax.toml", ["syntax.toml", "line"]),
    ("unknown_node_ref.toml", ["unknown_node_ref.toml", "node '"]),
    ("missing_module.toml", ["missing_module.toml", "node '"]),
    ("missing_attr.toml", ["missing_attr.toml", "node '"]),
    ("unknown_input_port.toml", ["unknown_input_port.toml", "node '"]),
    ("unknown_output_port.toml", ["unknown_output_port.toml", "node '"]),
    ("kind_mismatch.toml", ["kind_mismatch.toml", "node '"]),
    ("self_loop.toml", ["self_loop.toml", "node '"]),
    ("unknown_option.toml", ["unknown_option.toml", "node '"]),
]


@pytest.mark.parametrize(("name", "fragments"), BAD_FLOWS, ids=[b[0] for b in BAD_FLOWS])
def test_a_broken_flow_file_exits_2_with_one_clear_message(
    name: str, fragments: list[str], tmp_path: Path
) -> None:
    result = mediaflow("run", str(FLOWS / name), "--until-idle", "--data", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("mediaflow: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr
    # Nothing was started: no run, no queue file.
    assert not (tmp_path / "queue.sqlite3").exists()


def test_run_until_idle_with_jsonl(tmp_path: Path) -> None:
    result = mediaflow(
        "run", "samples/levels.toml", "--until-idle", "--jsonl", "--data", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    audio = [line for line in lines if line["port"] == "audio"]
    levels = [line for line in lines if line["port"] == "rms_dbfs"]
    assert len(audio) == 50 and len(levels) == 50
    assert [a["value"]["meta"]["seq"] for a in audio] == list(range(50))
    assert audio[0]["value"]["media_type"] == "audio/wav"
    assert all(-40 < level["value"] < 0 for level in levels)


def test_jsonl_into_a_reader_that_stops_ends_the_run_quietly(tmp_path: Path) -> None:
    # `mediaflow run flow.toml --jsonl | head -3`: the closed pipe must not fail
    # (retry, dead-letter) a node's item; the run stops writing and ends promptly.
    command = ["run", "samples/levels.toml", "--jsonl", "--data", str(tmp_path)]
    run = subprocess.Popen(
        [sys.executable, "-m", "mediaflow", *command],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None and run.stderr is not None
    try:
        lines = [run.stdout.readline() for _ in range(3)]
        assert all(json.loads(line)["node"] in {"tone", "meter"} for line in lines)
        run.stdout.close()  # the reader goes, as `head -3` does
        started = time.monotonic()
        code = run.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    stderr = run.stderr.read()
    run.stderr.close()
    assert code == 0, stderr
    assert took < 10, stderr
    for fragment in ("cascade_dropped", "cascade_retry", "BrokenPipe", "Traceback"):
        assert fragment not in stderr


def test_unknown_flow_file_exits_2(tmp_path: Path) -> None:
    result = mediaflow("run", str(tmp_path / "nope.toml"), "--data", str(tmp_path))
    assert result.returncode == 2
    assert "nope.toml" in result.stderr


@pytest.mark.parametrize(
    ("chunk_ms", "last_line"),
    [
        # Refused at load, against ToneSource's `chunk_ms: int`: nothing starts.
        ('"fast"', "{flow}: node 'tone': option 'chunk_ms' must be int, got 'fast' (str)"),
        # Of the right type, refused by ToneSource's constructor when the run starts.
        (
            "-5",
            "cannot start flow 'levels': node 'tone' refused its options: "
            "chunks, chunk_ms and rate must be positive",
        ),
    ],
    ids=["wrong-type", "constructor-refuses"],
)
def test_a_bad_option_value_exits_2_naming_the_node_and_option(
    tmp_path: Path, chunk_ms: str, last_line: str
) -> None:
    shutil.copy(REPO / "samples" / "levels.py", tmp_path)
    sample = (REPO / "samples" / "levels.toml").read_text()
    flow = tmp_path / "levels.toml"
    flow.write_text(sample.replace("chunk_ms = 100", f"chunk_ms = {chunk_ms}"))
    result = mediaflow("run", str(flow), "--until-idle", "--data", str(tmp_path / "d"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "mediaflow: " + last_line.format(flow=flow)
    assert "Traceback" not in result.stderr


def test_run_for_seconds_stops_on_time(tmp_path: Path) -> None:
    flow = tmp_path / "endless.toml"
    flow.write_text(
        '[flow]\nname = "endless"\n'
        '[[node]]\nid = "src"\nuse = "tests.engine_nodes:Counter"\ncount = 1000000\n'
        "period_s = 0.01\n"
        '[[node]]\nid = "sink"\nuse = "tests.engine_nodes:Recorder"\n'
        'inputs = { chunk = "src.chunk" }\n'
    )
    started = time.monotonic()
    result = mediaflow("run", str(flow), "--for", "1", "--data", str(tmp_path / "d"), "-v")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    assert "stopped on time" in result.stderr


def test_sigkill_mid_drain_then_restart_delivers_every_chunk(tmp_path: Path) -> None:
    """Kill -9 while a slow consumer drains a journaled backlog; restart; every
    chunk arrives, and a chunk seen twice is marked as a redelivery."""
    count = 1500
    drain = DrainFlow.write(tmp_path, count)
    log_file, done_file = drain.log_file, drain.done_file
    drain.run_and_kill()
    first = read_deliveries(log_file)
    assert 200 <= len(first) < count, "the kill must land mid-drain"

    again = mediaflow(*drain.args("-v"), timeout=120)
    assert again.returncode == 0, again.stderr
    assert "resumed after an unclean stop" in again.stderr
    rows = read_deliveries(log_file)
    seqs = [seq for seq, _, _ in rows]
    assert sorted(set(seqs)) == list(range(count)), "every journaled chunk is delivered"
    seen: set[int] = set()
    for seq, deliveries, redelivery in rows:
        if seq in seen:
            assert redelivery and deliveries > 1, f"seq {seq} repeated without the mark"
        seen.add(seq)
    # The source had finished before the kill: it was not run a second time.
    assert len(rows) - len(first) < count
    assert done_file.read_text() == str(count)


def test_an_item_that_keeps_killing_the_process_is_dead_lettered(tmp_path: Path) -> None:
    """MAX_DELIVERIES: a chunk whose node kills the process is delivered again on
    each restart, then dead-lettered and reported instead of crashing forever."""
    log_file = tmp_path / "runs.log"
    flow = tmp_path / "poison.toml"
    flow.write_text(
        '[flow]\nname = "poison"\n'
        '[[node]]\nid = "src"\nuse = "tests.engine_nodes:Counter"\ncount = 8\n'
        '[[node]]\nid = "crash"\nuse = "tests.engine_nodes:Crasher"\ncrash_on = 3\n'
        f'log_file = "{log_file}"\ninputs = {{ chunk = "src.chunk" }}\n'
    )
    data = str(tmp_path / "data")
    env = {"MEDIAFLOW_MAX_DELIVERIES": "2"}
    codes = []
    for _ in range(5):
        result = mediaflow("run", str(flow), "--until-idle", "--data", data, "-v", env=env)
        codes.append(result.returncode)
        if result.returncode == 0:
            break
    assert codes == [9, 9, 0], result.stderr
    assert "cascade_dropped" in result.stderr and "MEDIAFLOW_MAX_DELIVERIES=2" in result.stderr
    rows = read_deliveries(log_file)
    assert [(d, r) for seq, d, r in rows if seq == 3] == [(1, False), (2, True)]
    assert {seq for seq, _, _ in rows} == set(range(8)) - set() and rows[-1][0] == 7


# The commands that open the queue, each with what it needs to start.
EVERY_QUEUE_COMMAND = pytest.mark.parametrize(
    "command",
    [
        ["run", "samples/levels.toml", "--until-idle"],
        ["serve", "--port", "0"],
        ["demo", "--for", "1", "--port", "0"],
        ["gc"],
    ],
    ids=["run", "serve", "demo", "gc"],
)


@EVERY_QUEUE_COMMAND
@pytest.mark.parametrize("setting", ["amqp://broker/q", "postgres://db/q"])
def test_an_unsupported_queue_setting_exits_2_naming_it(
    command: list[str], setting: str, tmp_path: Path
) -> None:
    result = mediaflow(*command, "--data", str(tmp_path), env={"MEDIAFLOW_QUEUE": setting})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"mediaflow: MEDIAFLOW_QUEUE={setting!r} is not a queue"), lines
    assert "'sqlite'" in lines[-1]  # what is supported
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "queue.sqlite3").exists()


@EVERY_QUEUE_COMMAND
def test_a_bad_sqlite_sync_setting_exits_2_before_anything_starts(
    command: list[str], tmp_path: Path
) -> None:
    # Read with the other settings at the boundary, so refused as one of them.
    result = mediaflow(*command, "--data", str(tmp_path), env={"MEDIAFLOW_SQLITE_SYNC": "often"})
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line == "mediaflow: MEDIAFLOW_SQLITE_SYNC='OFTEN' must be NORMAL or FULL", line
    assert not (tmp_path / "queue.sqlite3").exists()


def test_serve_names_the_queue_flag_when_it_came_from_there(tmp_path: Path) -> None:
    result = mediaflow("serve", "--port", "0", "--queue", "amqp://x", "--data", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "mediaflow: --queue='amqp://x' is not a queue this mediaflow supports: expected "
        "'sqlite' (the default), 'sqlite:///absolute/path', 'sqlite://relative/path', "
        "or 'redis://host:port/db' (also rediss:// and unix://; ?prefix=NAME namespaces "
        "the keys)"
    )


def test_a_redis_queue_that_does_not_answer_exits_1_naming_it(tmp_path: Path) -> None:
    result = mediaflow(
        "run", "samples/levels.toml", "--until-idle", "--data", str(tmp_path),
        env={"MEDIAFLOW_QUEUE": "redis://127.0.0.1:1/0"},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("mediaflow: cannot start flow 'levels': redis redis://127.0.0.1:1/0")
    assert "Traceback" not in result.stderr
