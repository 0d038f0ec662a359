"""The chaos bench's processes: ``mediaflow run``/``worker`` and a durable ``redis-server``.

Each is started, SIGKILLed and started again by :mod:`bench.chaos.run`. The run's
``--jsonl`` stdout is read on a thread into a :class:`SourceProgress`: which seq the
microphone emitted last and when, so kills can be aimed at moments the sources are
capturing. Everything else a process prints goes to a file of its own per start
(``<role>-<n>.out``/``.err``), kept for the report. Methods block.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from bench._lib.common import REPO_ROOT

HOST = "127.0.0.1"


class Victim(Protocol):
    """What the schedule can kill and bring back."""

    def kill(self) -> None: ...

    def start(self) -> None: ...


# -- progress of the source, from the run's --jsonl -----------------------------------


@dataclass
class SourceProgress:
    """The newest ``seq`` a source node emitted on a port, as the run printed it."""

    node: str
    port: str
    seq: int = -1
    emitted: int = 0  # values seen from the current start of the run
    last_at: float = 0.0  # time.monotonic() of the newest
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def restart(self) -> None:
        with self._lock:
            self.emitted = 0

    def snapshot(self) -> tuple[int, int, float]:
        with self._lock:
            return self.seq, self.emitted, self.last_at

    def follow(self, stream: IO[str], copy: IO[str]) -> None:
        """Thread body: read ``--jsonl`` lines until EOF, copying each to ``copy``."""
        for line in stream:
            copy.write(line)
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("node") != self.node or row.get("port") != self.port:
                continue
            meta = (row.get("value") or {}).get("meta") or {}
            if isinstance(meta.get("seq"), int):
                with self._lock:
                    self.seq = max(self.seq, meta["seq"])
                    self.emitted += 1
                    self.last_at = time.monotonic()
        copy.close()


# -- mediaflow processes --------------------------------------------------------------


class MediaflowProcess:
    """``python -m mediaflow ARGS`` from the repository root; started again after a kill.

    ``progress``: follow the run's ``--jsonl`` stdout (the process that runs the
    sources); otherwise stdout goes to a file.
    """

    def __init__(
        self,
        role: str,
        args: list[str],
        env: dict[str, str],
        logs: Path,
        progress: SourceProgress | None = None,
    ) -> None:
        self.role = role
        self.args = args
        self.env = env
        self.logs = logs
        self.progress = progress
        self.starts = 0
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        self.starts += 1
        stem = self.logs / f"{self.role}-{self.starts}"
        stderr = open(f"{stem}.err", "w")  # noqa: SIM115 - the child holds it
        stdout_file = open(f"{stem}.out", "w")  # noqa: SIM115 - closed by the reader or below
        piped = self.progress is not None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mediaflow", *self.args],
            cwd=REPO_ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if piped else stdout_file,
            stderr=stderr,
            text=True,
        )
        stderr.close()
        if self.progress is not None and self.proc.stdout is not None:
            self.progress.restart()
            self._reader = threading.Thread(
                target=self.progress.follow, args=(self.proc.stdout, stdout_file), daemon=True
            )
            self._reader.start()
        else:
            stdout_file.close()

    def wait_ready(self, deadline: float) -> None:
        """Return once this start logged that it joined the flow ("running flow" /
        "working on flow"). Raises ``RuntimeError`` if it exits first or by ``deadline``."""
        err = self.logs / f"{self.role}-{self.starts}.err"
        while time.monotonic() < deadline:
            text = err.read_text(errors="replace") if err.exists() else ""
            if " flow '" in text and ("running flow" in text or "working on flow" in text):
                return
            if self.poll() is not None:
                raise RuntimeError(f"{self.role} exited {self.poll()} at start:\n{text[-2000:]}")
            time.sleep(0.02)
        raise RuntimeError(f"{self.role} did not join the flow in time")

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """SIGKILL, and wait for it (and its stdout reader) to be gone."""
        self._end(signal.SIGKILL, 10.0)

    def terminate(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM (a clean stop), SIGKILL after ``timeout_s``; the exit status."""
        return self._end(signal.SIGTERM, timeout_s)

    def wait(self, timeout_s: float) -> int | None:
        """The exit status once it exits on its own, None if still running after ``timeout_s``."""
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._join_reader()
        return code

    def _end(self, sig: signal.Signals, timeout_s: float) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._join_reader()
        return self.proc.returncode

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=10)
            self._reader = None


# -- redis-server ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


class RedisProcess:
    """``redis-server`` on a loopback port with ``appendonly yes``, ``appendfsync
    always``: a SIGKILL loses no write it acknowledged, and :meth:`start` brings it
    back on the same port with its data. (The test suite passes
    ``tests.redis_server.launch(..., appendonly=True)`` instead: the same face.)"""

    def __init__(self, directory: Path, binary: str = "redis-server") -> None:
        self.directory = directory
        self.binary = binary
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self, timeout_s: float = 30.0) -> None:
        """Start it and return once it answers PING (it may load its AOF first).
        Raises ``RuntimeError`` with its log's tail if it exits or never answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        argv = [
            self.binary, "--port", str(self.port), "--bind", HOST,
            "--dir", str(self.directory), "--logfile", str(self.directory / "redis.log"),
            "--daemonize", "no", "--save", "",
            "--appendonly", "yes", "--appendfsync", "always",
        ]  # fmt: skip
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while not self._pong():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                self.kill()
                raise RuntimeError(f"redis-server on port {self.port} did not start:\n{log}")
            time.sleep(0.02)

    def _pong(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1.0) as conn:
                conn.sendall(b"*1\r\n$4\r\nPING\r\n")
                return conn.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: a crash."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM: a clean shutdown."""
        self._end(signal.SIGTERM)

    def _end(self, sig: signal.Signals) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def child_env(queue_url: str | None, lease_ms: int) -> dict[str, str]:
    """The environment of every mediaflow child: this one, the repository importable
    (the flow's consumer is ``bench.chaos.nodes``), the queue and the lease."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLOW_")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    env["MEDIAFLOW_LEASE_MS"] = str(lease_ms)
    if queue_url:
        env["MEDIAFLOW_QUEUE"] = queue_url
    return env
