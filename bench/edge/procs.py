"""The bench's processes, each on loopback: ``redis-server`` (the shared queue),
``mediaflow serve`` (the artifact service) and ``mediaflow run`` (the edge box, or
the same flow without forwarding).

Redis and the service are stopped and started again on the same port and data
directory (an outage of the uplink); Redis keeps an append-only file (``appendfsync
everysec``, what an operator runs), so nothing it acknowledged is lost across the
restart. A ``mediaflow`` child writes its stderr to a log file of its own and its
stdout (``--jsonl``) to another. Methods block.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench._lib.children import HOST, LoggedChild, clean_env, free_port, stop_child
from bench._lib.common import REPO_ROOT

START_S = 60.0
TOKEN = "bench-edge-token"
SERVING = re.compile(r"serving on (http://127\.0\.0\.1:\d+)")


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class Redis:
    """``redis-server`` on ``port`` with its append-only file in ``directory``."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> None:
        """Start it and return once it answers PING (loading its file first)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        argv = [
            self.binary,
            "--port", str(self.port), "--bind", HOST, "--dir", str(self.directory),
            "--logfile", str(self.directory / "redis.log"), "--daemonize", "no",
            "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
        ]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + START_S
        while not _answers(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                stop_child(self.proc)
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """SIGTERM: Redis writes what it holds and exits."""
        stop_child(self.proc)
        self.proc = None


class Service:
    """``mediaflow serve`` (the artifact service) on ``port`` (0 at first: a free one,
    kept for every later start) with its data in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        """Start it and return once it listens."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        log = self.directory.parent / f"service-{self.starts}.log"
        env = clean_env(MEDIAFLOW_TOKEN=TOKEN, ARTIFACT_GC_INTERVAL_S="0")
        argv = [sys.executable, "-m", "mediaflow", "serve", "--port", str(self.port)]
        with log.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [*argv, "--data", str(self.directory / "data")],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        url = _wait_for_url(self.proc, log)
        self.port = int(url.rsplit(":", 1)[1])

    def stop(self) -> None:
        stop_child(self.proc)
        self.proc = None


class FlowRun(LoggedChild):
    """``mediaflow run FLOW --data DIR --port 0 --jsonl ARGS`` with ``env`` added to a
    clean environment (no ``MEDIAFLOW_*`` or ``ARTIFACT_*`` of this shell's)."""

    def __init__(self, flow: Path, data_dir: Path, args: list[str], **env: str) -> None:
        self.log = data_dir.parent / f"{data_dir.name}.log"
        self.out = data_dir.parent / f"{data_dir.name}.jsonl"
        argv = [sys.executable, "-m", "mediaflow", "run", str(flow), "--data", str(data_dir)]
        with self.log.open("wb") as stderr, self.out.open("wb") as stdout:
            self.proc = subprocess.Popen(
                [*argv, "--port", "0", "--jsonl", *args],
                cwd=REPO_ROOT,
                env=clean_env(**env),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )
        self.url = _wait_for_url(self.proc, self.log)


def _wait_for_url(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + START_S
    while True:
        found = SERVING.search(log.read_text(errors="replace"))
        if found is not None:
            return found.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_child(proc)
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise RuntimeError(f"{log.name}: no 'serving on' line:\n{tail}")
        time.sleep(0.02)
