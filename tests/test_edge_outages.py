"""An edge box rides out its uplink (issue 27, item 2): ``mediaflow run`` in a child
process with a file microphone in real time, saving to an artifact service
(``mediaflow serve``, another child) or queueing on Redis, while the service or
Redis is away, from the start or in the middle, then back on the same port. The
source waits and carries on with the same ``seq``: every chunk exists and is on
the service, nothing is dead-lettered, the source never ends by an error, and the
run exits 0. A source that does end by an error makes ``run`` exit 1 naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.redis_server import RedisServer, free_port
from tests.store_service import REPO, TOKEN, Service, start_service

CHUNKS = 40  # 4 s of sound in chunks of 100 ms
OUTAGE_S = 2.0
DEADLINE_S = 60.0
FLOW = """
[flow]
name = "edge"

[[node]]
id = "mic"
connector = "microphone"
device = "file:noise.wav"
chunk_ms = 100
realtime = true

[[node]]
id = "echo"
use = "echo:Echo"
inputs = { audio = "mic.audio" }
"""
# A node that saves what it reads, reversed: a consumer that saves to the service too.
ECHO = """
from typing import Any, ClassVar, Mapping

from mediaflow import Context, Node


class Echo(Node):
    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}
    outputs: ClassVar[Mapping[str, str]] = {"reversed": "json"}

    async def run(self, ctx: Context) -> dict[str, Any]:
        data = await ctx.read_artifact(ctx.inputs["audio"])
        ref = await ctx.save_artifact(data[::-1], "application/octet-stream")
        return {"reversed": ref.digest}
"""
# What the child must not inherit from the test's environment.
_CLEARED = ("MEDIAFLOW_STORE", "MEDIAFLOW_QUEUE", "MEDIAFLOW_DATA", "MEDIAFLOW_TOKEN")


@dataclass
class Edge:
    """A running ``mediaflow run --until-idle --jsonl`` and the files it writes."""

    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def lines(self) -> list[dict[str, object]]:
        text = self.stdout.read_text()
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not condition():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError(f"gave up waiting for {what}:\n{self.log()}")
            time.sleep(0.02)

    def finish(self) -> int:
        try:
            return self.process.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the edge run did not finish:\n{self.log()}") from None


def write_flow(place: Path, flow: str = FLOW, **modules: str) -> Path:
    """The flow file, its node modules, and 4 s of noise (every chunk's bytes differ)."""
    place.mkdir(parents=True, exist_ok=True)
    noise = np.random.default_rng(27).integers(-8000, 8000, CHUNKS * 1600, dtype="<i2")
    with wave.open(str(place / "noise.wav"), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(noise.tobytes())
    for name, source in {"echo": ECHO, **modules}.items():
        (place / f"{name}.py").write_text(source)
    path = place / "edge.toml"
    path.write_text(flow)
    return path


def start_edge(flow: Path, data: Path, **env: str) -> Edge:
    """``mediaflow run FLOW --until-idle --jsonl`` (the worktree's code: the child
    runs this interpreter with this environment) with retries kept short."""
    child_env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    child_env.update(MEDIAFLOW_RETRY_MAX_S="1", ARTIFACT_GC_INTERVAL_S="0", **env)
    stdout, stderr = data.with_suffix(".jsonl"), data.with_suffix(".log")
    argv = [sys.executable, "-m", "mediaflow", "run", str(flow), "--until-idle", "--jsonl"]
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(
            [*argv, "--data", str(data)],
            cwd=REPO,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
    return Edge(process, stdout, stderr)


def mic_refs(edge: Edge) -> list[dict[str, object]]:
    refs = [line["value"] for line in edge.lines() if line["node"] == "mic"]
    return [ref for ref in refs if isinstance(ref, dict)]


def event_lines(log: str, event_type: str) -> list[str]:
    return [line for line in log.splitlines() if f" {event_type} " in line]


def assert_rode_it_out(edge: Edge, code: int) -> list[str]:
    """Exit 0, every chunk emitted once in ``seq`` order, every one read by the echo
    node, no dead letter and no source ended by an error. Returns the digests the
    run emitted (the chunks' and the echo's)."""
    log = edge.log()
    assert code == 0, log
    assert "Traceback" not in log and "cascade_dropped" not in log, log
    refs = mic_refs(edge)
    seqs = [ref["meta"]["seq"] for ref in refs]  # type: ignore[index]
    assert seqs == list(range(CHUNKS)), "a chunk is missing or repeated"
    echoed = [line["value"] for line in edge.lines() if line["node"] == "echo"]
    assert len(echoed) == CHUNKS
    ended = event_lines(log, "source_ended")
    assert ended and all(line.endswith("error=None") for line in ended), ended
    assert "ended by error" not in log
    return [str(ref["digest"]) for ref in refs] + [str(digest) for digest in echoed]


def assert_told_once(log: str, down: str, up: str) -> None:
    assert len(event_lines(log, down)) == 1, log
    assert len(event_lines(log, up)) == 1, log
    assert TOKEN not in log


# -- the artifact service away -------------------------------------------------------------


def test_a_service_away_at_the_start_holds_the_source_back_and_loses_nothing(
    tmp_path: Path,
) -> None:
    """Nothing listens on the service's port when the edge starts: the microphone's
    first save waits; the service starts after the outage was told; every chunk
    lands there."""
    port = free_port()
    flow = write_flow(tmp_path / "flow")
    edge = start_edge(
        flow, tmp_path / "edge", MEDIAFLOW_STORE=f"http://127.0.0.1:{port}", MEDIAFLOW_TOKEN=TOKEN
    )
    service: Service | None = None
    try:
        edge.wait_for(lambda: bool(event_lines(edge.log(), "store_unavailable")), "the outage")
        time.sleep(OUTAGE_S)
        assert edge.process.poll() is None and mic_refs(edge) == []
        service = start_service(tmp_path / "store", port=port)
        code = edge.finish()
    finally:
        edge.process.kill()
        if service is not None:
            service.stop()
    emitted = assert_rode_it_out(edge, code)
    assert set(emitted) <= service.stored_digests(), "a reference the service cannot resolve"
    assert_told_once(edge.log(), "store_unavailable", "store_available")


def test_a_service_outage_in_the_middle_loses_no_chunk(tmp_path: Path) -> None:
    """The service stops after a few chunks and starts again on the same port with
    the same data a couple of seconds later."""
    flow = write_flow(tmp_path / "flow")
    service = start_service(tmp_path / "store")
    port = int(service.url.rsplit(":", 1)[1])
    edge = start_edge(flow, tmp_path / "edge", MEDIAFLOW_STORE=service.url, MEDIAFLOW_TOKEN=TOKEN)
    try:
        edge.wait_for(lambda: len(mic_refs(edge)) >= 8, "the first chunks")
        service.stop()
        time.sleep(OUTAGE_S)
        service = start_service(tmp_path / "store", port=port)
        code = edge.finish()
    finally:
        edge.process.kill()
        service.stop()
    emitted = assert_rode_it_out(edge, code)
    assert set(emitted) <= service.stored_digests(), "a reference the service cannot resolve"
    assert len(mic_refs(edge)) == CHUNKS
    assert_told_once(edge.log(), "store_unavailable", "store_available")


# -- Redis away -----------------------------------------------------------------------------


def test_a_redis_outage_in_the_middle_neither_ends_nor_dead_letters_the_source(
    tmp_path: Path, durable_redis_server: RedisServer
) -> None:
    """The queue goes away under a source in real time: its emissions wait in the
    journal's outbox (far from full here), it never fails or ends, and once Redis is
    back every chunk reaches the echo node."""
    flow = write_flow(tmp_path / "flow")
    edge = start_edge(flow, tmp_path / "edge", MEDIAFLOW_QUEUE=durable_redis_server.url)
    try:
        edge.wait_for(lambda: len(mic_refs(edge)) >= 8, "the first chunks")
        durable_redis_server.stop()
        time.sleep(OUTAGE_S)
        durable_redis_server.start()
        code = edge.finish()
    finally:
        edge.process.kill()
    assert_rode_it_out(edge, code)
    assert_told_once(edge.log(), "queue_unavailable", "queue_available")


# -- a source that ends by an error ---------------------------------------------------------

BROKEN = '''
from pathlib import Path
from typing import ClassVar, Mapping

from mediaflow import Context, Node


class Broken(Node):
    """Emits one value and raises, every time; or (``once``) only the first time."""

    outputs: ClassVar[Mapping[str, str]] = {"n": "number"}

    def __init__(self, once: bool = False) -> None:
        self.once = once

    async def run(self, ctx: Context) -> None:
        await ctx.emit("n", 1)
        marker = ctx.more.flow_dir / "failed-once"
        if not (self.once and marker.exists()):
            marker.touch()
            raise RuntimeError("the sensor fell off")
'''


def run_broken(tmp_path: Path, *, once: bool) -> subprocess.CompletedProcess[str]:
    flow = write_flow(
        tmp_path / "flow",
        '[flow]\nname = "broken"\n\n[[node]]\nid = "sensor"\nuse = "broken:Broken"\n'
        f"once = {str(once).lower()}\n",
        broken=BROKEN,
    )
    child_env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    child_env.update(MEDIAFLOW_MAX_ATTEMPTS="2", MEDIAFLOW_RETRY_BASE_S="0.05")
    argv = [sys.executable, "-m", "mediaflow", "run", str(flow), "--until-idle"]
    return subprocess.run(
        [*argv, "--data", str(tmp_path / "data")],
        cwd=REPO,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


def test_a_source_that_ends_by_an_error_makes_run_exit_1_naming_it(tmp_path: Path) -> None:
    result = run_broken(tmp_path, once=False)
    assert result.returncode == 1, result.stderr
    named = [line for line in result.stderr.splitlines() if "ended by error" in line]
    assert named == ["mediaflow: source 'sensor' ended by error: RuntimeError: the sensor fell off"]
    assert "cascade_dropped" in result.stderr  # its restarts (MEDIAFLOW_MAX_ATTEMPTS) used up


def test_a_source_its_restart_brought_back_is_no_failure(tmp_path: Path) -> None:
    result = run_broken(tmp_path, once=True)
    assert result.returncode == 0, result.stderr
    assert "ended by error" not in result.stderr
    assert len(event_lines(result.stderr, "source_started")) == 2
