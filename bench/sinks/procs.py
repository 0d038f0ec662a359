"""The bench's processes, each on loopback: ``mosquitto`` (the broker), the webhook
receiver (:mod:`bench.sinks.receiver`) and ``mediaflow run`` (a flow of its own, so
its RSS is the flow's). Methods block; run them in a thread from asyncio.

The broker is Debian's ``mosquitto`` from a config of the bench's (``listener PORT
127.0.0.1``, persistence in its directory, saved on SIGTERM), stopped and started
again on the same port: a subscriber's QoS 1 session outlives the outage, as a Home
Assistant's does.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench._lib.children import HOST, LoggedChild, clean_env, free_port, stop_child
from bench._lib.common import REPO_ROOT

START_S = 30.0
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


def mosquitto_binary() -> str | None:
    """Debian's broker (``/usr/sbin`` is not on every PATH), None without it."""
    return shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/bin")


class Broker:
    """``mosquitto`` on ``port``, its config, log and persistence in ``directory``."""

    def __init__(self, directory: Path) -> None:
        binary = mosquitto_binary()
        if binary is None:
            raise RuntimeError("mosquitto is not installed (apt-get install mosquitto)")
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)
        lines = [
            f"listener {self.port} {HOST}",
            "allow_anonymous true",
            "persistence true",
            f"persistence_location {directory}/",
            "autosave_interval 0",
            f"log_dest file {directory / 'mosquitto.log'}",
            "log_type error",
            "log_type warning",
            "max_queued_messages 1000000",  # the subscriber's backlog over an outage
            "max_inflight_messages 20",
        ]
        if os.geteuid() == 0:
            lines.append("user root")  # else it drops to 'mosquitto', who cannot write here
        self.config = directory / "mosquitto.conf"
        self.config.write_text("\n".join(lines) + "\n")

    @property
    def url(self) -> str:
        return f"mqtt://{HOST}:{self.port}"

    def start(self) -> None:
        """Start it (again, on the same port) and return once it accepts connections.
        Raises ``RuntimeError`` if it does not within :data:`START_S`."""
        self.proc = subprocess.Popen(
            [self.binary, "-c", str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_S
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection((HOST, self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        stop_child(self.proc)
        raise RuntimeError(f"mosquitto did not start on port {self.port} (see {self.directory})")

    def stop(self) -> None:
        """SIGTERM: it saves its persistence file, then exits."""
        stop_child(self.proc)
        self.proc = None


class Receiver:
    """The webhook receiver (:mod:`bench.sinks.receiver`), a process of its own."""

    def __init__(self, directory: Path, secret: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.log = directory / "receiver.log"
        argv = [sys.executable, "-m", "bench.sinks.receiver", "--secret", secret]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=REPO_ROOT, env=clean_env(), stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.url = _wait_for(LISTENING, self.proc, self.log)

    @property
    def hook(self) -> str:
        return f"{self.url}/hook"

    def stop(self) -> None:
        stop_child(self.proc)


class FlowRun(LoggedChild):
    """``mediaflow run FLOW --data DIR --until-idle`` with ``env`` added to a clean
    environment; its log (stderr and stdout) in ``DIR.log``."""

    def __init__(self, flow: Path, data_dir: Path, **env: str) -> None:
        self.log = data_dir.parent / f"{data_dir.name}.log"
        argv = [sys.executable, "-m", "mediaflow", "run", str(flow), "--data", str(data_dir)]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*argv, "--until-idle"], cwd=REPO_ROOT, env=clean_env(**env),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip


def _wait_for(pattern: re.Pattern[str], proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + START_S
    while True:
        found = pattern.search(log.read_text(errors="replace"))
        if found is not None:
            return found.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_child(proc)
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise RuntimeError(f"{log.name}: did not start:\n{tail}")
        time.sleep(0.02)
