"""``mediaflow worker``: more executors of one flow, as real processes on one queue.

The flow: a paced source and four ordered consumers (``ProcessLog``: each
delivery appended to one shared log as ``pid node seq deliveries``). The run's
own process and two workers claim the work; the leases of
:mod:`mediaflow.engine.leasing` give each consumer's stream to one of them at a
time. Checked from the log:

* every chunk reaches every consumer (nothing lost);
* per consumer, first deliveries come in the order emitted, across processes
  (ordering per edge), and a repeat is always a marked redelivery;
* the work spreads: more than one process ran consumers;
* SIGKILL of a worker mid-stream loses nothing (its streams move within the
  lease and its unacked items are run again, marked); SIGTERM loses nothing and
  repeats nothing (it finishes what it holds and hands its leases over).

On Redis (the backend for several machines) and on the embedded SQLite queue
(workers on one machine, one ``--data``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.redis_server import RedisServer

REPO = Path(__file__).resolve().parent.parent
CONSUMERS = ("a", "b", "c", "d")
COUNT = 1500
LEASE_MS = 1500  # a dead worker's streams move within this (touches every 0.5 s)


@dataclass(frozen=True)
class Line:
    pid: int
    node: str
    seq: int
    deliveries: int


@dataclass
class Cluster:
    """The flow file, the shared log and the processes of one test."""

    where: Path
    env: dict[str, str]
    shared_data: bool
    procs: dict[str, subprocess.Popen[str]]

    @property
    def flow(self) -> Path:
        return self.where / "spread.toml"

    @property
    def log(self) -> Path:
        return self.where / "work.log"

    def write_flow(self, count: int = COUNT, period_s: float = 0.002) -> None:
        nodes = "".join(
            f'[[node]]\nid = "{n}"\nuse = "tests.engine_nodes:ProcessLog"\n'
            f'log_file = "{self.log}"\ndelay_s = 0.001\ninputs = {{ chunk = "src.chunk" }}\n'
            for n in CONSUMERS
        )
        self.flow.write_text(
            '[flow]\nname = "spread"\n'
            f'[[node]]\nid = "src"\nuse = "tests.engine_nodes:Counter"\ncount = {count}\n'
            f'period_s = {period_s}\ndone_file = "{self.where / "src.done"}"\n' + nodes
        )

    def data(self, name: str) -> Path:
        return self.where / ("data" if self.shared_data else f"data-{name}")

    def start(self, name: str, *args: str) -> subprocess.Popen[str]:
        command = args[0]
        proc = subprocess.Popen(
            [sys.executable, "-m", "mediaflow", *args, "--data", str(self.data(name))],
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE if command == "worker" else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs[name] = proc
        return proc

    def start_run(self) -> subprocess.Popen[str]:
        return self.start("run", "run", str(self.flow), "--until-idle")

    def start_worker(self, name: str) -> subprocess.Popen[str]:
        return self.start(name, "worker", str(self.flow), "--jsonl")

    def lines(self) -> list[Line]:
        if not self.log.exists():
            return []
        out = []
        for raw in self.log.read_text().splitlines():
            pid, node, seq, deliveries = raw.split()
            out.append(Line(int(pid), node, int(seq), int(deliveries)))
        return out

    def wait_for(self, what: str, check: object, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if callable(check) and check():
                return
            for name, proc in self.procs.items():
                if proc.poll() not in (None, 0):
                    raise AssertionError(f"{name} exited {proc.returncode}: {self.stderr(name)}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; lines: {len(self.lines())}")

    def stderr(self, name: str) -> str:
        proc = self.procs[name]
        if proc.poll() is None or proc.stderr is None:
            return ""
        return proc.stderr.read()[-3000:]

    def finish(self, name: str, timeout_s: float = 60.0) -> int:
        proc = self.procs[name]
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture(params=["redis", "sqlite"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    env = {**os.environ, "MEDIAFLOW_LEASE_MS": str(LEASE_MS), "PYTHONPATH": str(REPO)}
    shared = request.param == "sqlite"
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        env["MEDIAFLOW_QUEUE"] = f"{server.url}?prefix=workers-{uuid.uuid4().hex[:8]}"
    else:
        env.pop("MEDIAFLOW_QUEUE", None)
    made = Cluster(tmp_path, env, shared, {})
    made.write_flow()
    try:
        yield made
    finally:
        made.stop_all()


def check_every_chunk_in_order(lines: list[Line], count: int = COUNT) -> None:
    """Every consumer saw every seq; first deliveries in emission order; every
    repeat marked as a redelivery."""
    by_node: dict[str, list[Line]] = defaultdict(list)
    for line in lines:
        by_node[line.node].append(line)
    assert sorted(by_node) == sorted(CONSUMERS)
    for node, seen in by_node.items():
        assert {line.seq for line in seen} == set(range(count)), node
        firsts = [line.seq for line in seen if line.deliveries == 1]
        assert firsts == sorted(firsts), f"{node}: first deliveries out of order"
        repeats = Counter(line.seq for line in seen)
        for line in seen:
            if repeats[line.seq] > 1 and line.deliveries == 1:
                # The one unmarked delivery of a repeated chunk must be its first.
                assert line is next(x for x in seen if x.seq == line.seq), (node, line)
        assert all(line.deliveries <= 2 for line in seen), node


def worker_summary(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.read()


def test_a_killed_worker_loses_nothing_and_the_work_spreads(cluster: Cluster) -> None:
    cluster.start_run()
    first = cluster.start_worker("w1")
    second = cluster.start_worker("w2")
    # The killed worker has run part of the stream: its leases and its items move.
    cluster.wait_for(
        "the second worker to do work",
        lambda: sum(line.pid == second.pid for line in cluster.lines()) >= 100,
    )
    second.send_signal(signal.SIGKILL)
    second.wait(timeout=10)
    assert cluster.finish("run") == 0, cluster.stderr("run")
    first.send_signal(signal.SIGTERM)
    assert cluster.finish("w1") == 0, cluster.stderr("w1")
    lines = cluster.lines()
    check_every_chunk_in_order(lines)
    workers = {line.pid for line in lines}
    assert second.pid in workers
    assert len(workers) >= 2
    assert '"items"' in worker_summary(first)


def test_sigterm_finishes_what_a_worker_holds_and_repeats_nothing(cluster: Cluster) -> None:
    cluster.start_run()
    leaving = cluster.start_worker("w1")
    staying = cluster.start_worker("w2")
    cluster.wait_for(
        "both workers to do work",
        lambda: {leaving.pid, staying.pid} <= {line.pid for line in cluster.lines()},
    )
    leaving.send_signal(signal.SIGTERM)
    assert cluster.finish("w1", timeout_s=30) == 0, cluster.stderr("w1")
    stderr = cluster.stderr("w1")
    assert "worker:" in stderr and "items in" in stderr, stderr
    assert cluster.finish("run") == 0, cluster.stderr("run")
    staying.send_signal(signal.SIGTERM)
    assert cluster.finish("w2") == 0, cluster.stderr("w2")
    lines = cluster.lines()
    check_every_chunk_in_order(lines)
    repeated = [line for line in lines if line.deliveries != 1]
    assert not repeated, f"a clean handover repeats nothing: {repeated[:3]}; w1: {stderr}"
    assert len(lines) == COUNT * len(CONSUMERS)
