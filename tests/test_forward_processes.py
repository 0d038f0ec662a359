"""An edge box and the side its work goes to, as separate processes on loopback, while
the artifact service and then Redis are stopped and started again under them.

- a durable ``redis-server`` (append-only, fsync always): the shared queue;
- ``mediaflow serve``: the artifact service, stopped and started on the same port;
- the edge box: ``mediaflow run FLOW --until-idle --jsonl`` with
  ``MEDIAFLOW_FORWARD_QUEUE`` / ``MEDIAFLOW_FORWARD_STORE``, running a real-time lavfi
  camera and a real-time file microphone on its own journal and store;
- the central side: ``mediaflow worker FLOW --jsonl`` on ``MEDIAFLOW_QUEUE=redis://…``
  and ``MEDIAFLOW_STORE=http://…``, running the flow's two consumers
  (:mod:`tests.forward_witness`), which read every frame and chunk back from the
  service and write down the bytes' hash.

Each outage is started once the previous phase is seen in the logs (the box says the
link is down, then back), so the test asserts outcomes, never timings: every frame and
chunk the box emitted reaches a consumer with the bytes the box saved, once, first
deliveries in the order emitted, and the sources' ``seq`` has no gap.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mediaflow.queue import open_queue
from mediaflow.queue.contract import StreamKey
from mediaflow.store import ArtifactStore
from tests.forward_witness import read_deliveries
from tests.process_control import end_process
from tests.redis_server import RedisServer
from tests.store_service import REPO, TOKEN, start_service

SECONDS = 10  # of capture: the camera's lavfi duration and the WAV's length
FPS = 5
CHUNK_MS = 100
SLOW_S = 0.13  # a chunk's consumer, slower than the microphone: a backlog where the work goes
DOWN_S = 2.0  # each outage, counted from when the box has seen the link go
WAIT_S = 40.0  # the longest any phase may take before the test gives up
CHUNKS = StreamKey("edge", "chunks")
LINK_DOWN = "forward: the link is down"
LINK_BACK = "forward: the link is back"


def write_wav(path: Path, seconds: float, rate: int = 16000) -> None:
    """Seeded noise: no two chunks alike, so a chunk in the wrong place shows."""
    samples = np.random.default_rng(27).integers(-8000, 8000, int(seconds * rate), dtype="<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())


def write_flow(place: Path) -> Path:
    wav = place / "mic.wav"
    write_wav(wav, SECONDS)
    flow = place / "edge.toml"
    log_dir = place / "deliveries"
    flow.write_text(
        '[flow]\nname = "edge"\n\n'
        '[[node]]\nid = "cam"\nconnector = "camera"\n'
        f'device = "lavfi:testsrc2=size=160x120:rate=10:duration={SECONDS}"\nfps = {FPS}\n\n'
        '[[node]]\nid = "mic"\nconnector = "microphone"\n'
        f'device = "file:{wav}"\nchunk_ms = {CHUNK_MS}\n\n'
        '[[node]]\nid = "frames"\nuse = "tests.forward_witness:Frames"\n'
        f'log_dir = "{log_dir}"\ninputs = {{ image = "cam.image" }}\n\n'
        '[[node]]\nid = "chunks"\nuse = "tests.forward_witness:Chunks"\n'
        f'log_dir = "{log_dir}"\ndelay_s = {SLOW_S}\ninputs = {{ audio = "mic.audio" }}\n'
    )
    return flow


class Child:
    """A ``mediaflow`` command as a child process, its stdout and stderr in files."""

    def __init__(self, place: Path, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.out = place / f"{name}.jsonl"
        self.err = place / f"{name}.log"
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLOW_")}
        child_env.update(env, MEDIAFLOW_TOKEN=TOKEN)
        with self.out.open("wb") as stdout, self.err.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mediaflow", *argv],
                cwd=REPO,
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )

    def log(self) -> str:
        return self.err.read_text(errors="replace")

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def stop(self) -> int:
        """SIGTERM (a clean stop), SIGKILL after 30 s; the exit status."""
        end_process(self.process, signal.SIGTERM, 30.0)
        return self.process.returncode


def wait_until(what: str, done: Callable[[], bool], *children: Child) -> None:
    """Poll ``done``; fail at once if a child exits or dead-letters something."""
    deadline = time.monotonic() + WAIT_S
    while not done():
        for child in children:
            if child.process.poll() is not None or "cascade_dropped" in child.log():
                pytest.fail(f"{child.err.name} exited {child.process.returncode}:\n{child.log()}")
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {c.err.name}\n{c.log()[-3000:]}" for c in children)
            pytest.fail(f"not within {WAIT_S} s: {what}\n{logs}")
        time.sleep(0.05)


def test_an_edge_box_and_a_worker_as_processes_ride_out_the_service_and_redis(
    tmp_path: Path, durable_redis_server: RedisServer
) -> None:
    flow = write_flow(tmp_path)
    central = tmp_path / "central"
    services = [start_service(central)]
    port = int(services[0].url.rsplit(":", 1)[1])
    shared = {"MEDIAFLOW_QUEUE": durable_redis_server.url, "MEDIAFLOW_STORE": services[0].url}
    worker = Child(
        tmp_path,
        "worker",
        ["worker", str(flow), "--data", str(tmp_path / "cache"), "--jsonl"],
        shared,
    )
    forward = {
        "MEDIAFLOW_FORWARD_QUEUE": durable_redis_server.url,
        "MEDIAFLOW_FORWARD_STORE": services[0].url,
    }
    box = tmp_path / "box"
    run = ["run", str(flow), "--data", str(box), "--until-idle", "--jsonl"]
    edge = Child(tmp_path, "edge", run, forward)
    try:
        log_dir = tmp_path / "deliveries"
        both = (edge, worker)
        wait_until(
            "both streams reach the worker",
            lambda: bool(read_deliveries(log_dir, "frames") and read_deliveries(log_dir, "chunks")),
            *both,
        )
        # Chunks wait where the work goes: the slow consumer meets the service's outage.
        wait_until("a backlog of chunks", lambda: _shared_backlog(durable_redis_server) >= 3, *both)
        _outage(edge, worker, services[-1].stop, 1)
        services.append(start_service(central, port=port))
        wait_until("the box forwards again after the service", _said(edge, LINK_BACK, 1), *both)
        _outage(edge, worker, durable_redis_server.stop, 2)
        durable_redis_server.start()
        wait_until("the box forwards again after Redis", _said(edge, LINK_BACK, 2), *both)
        edge_status = edge.process.wait(WAIT_S + SECONDS)
        emitted = _emitted(edge)
        wait_until(
            "every emitted frame and chunk delivered",
            lambda: all(
                {d["seq"] for d in read_deliveries(log_dir, node)} >= set(emitted[node])
                for node in ("frames", "chunks")
            ),
            worker,
        )
        worker_status = worker.stop()
    finally:
        for child in (edge, worker):
            child.stop()
        for service in services:
            service.stop()
    assert edge_status == 0, edge.log()[-3000:]
    assert worker_status == 0, worker.log()[-3000:]
    store = ArtifactStore(box)
    for node, source in (("frames", "cam"), ("chunks", "mic")):
        seqs = list(emitted[node])  # in the order the box emitted them
        assert seqs == list(range(len(seqs))), f"{source}'s seq has gaps"
        assert len(seqs) >= SECONDS * (FPS if source == "cam" else 1000 // CHUNK_MS) * 0.9
        deliveries = read_deliveries(log_dir, node)
        first = [d for d in deliveries if not d["redelivery"]]
        assert [d["seq"] for d in deliveries] == seqs, f"{node}: each once, in the order emitted"
        assert [d["seq"] for d in first] == seqs
        for delivery in deliveries:
            saved = store.local_path(delivery["digest"]).read_bytes()  # what the box saved
            assert delivery["sha256"] == hashlib.sha256(saved).hexdigest(), delivery
            assert emitted[node][delivery["seq"]] == delivery["digest"]
    assert edge.log().count(LINK_DOWN) == 2 and edge.log().count(LINK_BACK) == 2
    # The link's return was found by a probe and the next round went through: the
    # round that met each outage is the only one that failed (pausing instead, 0.2 s
    # doubling, rounds would have failed all through it).
    backs = re.findall(
        r"link is back after \S+ s \((\d+) round\(s\) failed, (\d+) probe", edge.log()
    )
    assert [int(failed) for failed, _ in backs] == [1, 1], backs
    assert all(int(probes) >= 1 for _, probes in backs), backs
    assert "ERROR" not in edge.log(), "the box never lost its own queue or store"
    # The consumer met the outage and waited it out: each retry of an item the
    # service's absence failed counts no attempt, and nothing is dead-lettered.
    retries = [line for line in worker.log().splitlines() if "cascade_retry" in line]
    assert any("node=chunks" in line for line in retries), "the consumer met the outage"
    assert all("attempt=1 " in line and "StoreUnreachable" in line for line in retries)
    assert "cascade_retry" not in edge.log()
    for text in ("cascade_dropped", "Traceback"):
        assert text not in edge.log() + worker.log()


def _outage(edge: Child, worker: Child, stop: Callable[[], None], nth: int) -> None:
    """Stop a part of the link once the box forwards, and keep it away ``DOWN_S`` after
    the box has seen it go."""
    stop()
    wait_until(f"the box sees the link go ({nth})", _said(edge, LINK_DOWN, nth), edge, worker)
    time.sleep(DOWN_S)


def _shared_backlog(redis: RedisServer) -> int:
    """Chunks in the shared queue not yet done by the worker (claimed or not)."""

    async def look() -> int:
        queue = open_queue(redis.url, Path("/nonexistent"))
        try:
            backlog = await queue.backlog()
        finally:
            await queue.close()
        return backlog[CHUNKS].total if CHUNKS in backlog else 0

    return asyncio.run(look())


def _said(child: Child, text: str, times: int) -> Callable[[], bool]:
    return lambda: child.log().count(text) >= times


def _emitted(edge: Child) -> dict[str, dict[int, str]]:
    """``consumer -> {seq: digest}`` of what the box's sources emitted (its --jsonl)."""
    consumer = {"cam": "frames", "mic": "chunks"}
    emitted: dict[str, dict[int, str]] = {"frames": {}, "chunks": {}}
    for line in edge.lines():
        if line.get("node") in consumer and line.get("port") in ("image", "audio"):
            ref = line["value"]
            emitted[consumer[line["node"]]][ref["meta"]["seq"]] = ref["digest"]
    return emitted
