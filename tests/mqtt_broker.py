"""A real MQTT broker for tests: Debian's ``mosquitto`` on a free loopback port.

:func:`launch` starts one from a temp config (``listener PORT 127.0.0.1``,
persistence in the temp dir, so a subscriber's QoS 1 session and retained messages
outlive :meth:`Mosquitto.stop` / :meth:`Mosquitto.start` on the same port), either
open to anyone or, with ``users``, only to those in a password file
(``mosquitto_passwd``). The ``mosquitto`` fixture gives a test its own, stopped
after it. Skipped (with the reason) when ``mosquitto`` is not installed; in CI a
skip fails the run (``tests/ci_skips.py``). Needs the Debian package ``mosquitto``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.process_control import end_process
from tests.redis_server import HOST, free_port

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
MISSING = "mosquitto is not installed (apt-get install mosquitto)"


def mosquitto_binary() -> str:
    """Debian's broker (``/usr/sbin`` is not on every PATH); skips without it."""
    found = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/bin")
    if found is None:
        pytest.skip(MISSING)
    return found


class Mosquitto:
    """One broker process on ``HOST:port`` whose files live in ``directory``."""

    def __init__(self, directory: Path, users: Mapping[str, str] | None = None) -> None:
        self.binary = mosquitto_binary()
        self.directory = directory
        self.port = free_port()
        self.users = dict(users or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "mosquitto.log"
        self.config_path = directory / "mosquitto.conf"
        self._write_config()

    @property
    def url(self) -> str:
        return f"mqtt://{HOST}:{self.port}"

    def url_for(self, user: str, password: str) -> str:
        return f"mqtt://{user}:{password}@{HOST}:{self.port}"

    def _write_config(self) -> None:
        lines = [
            f"listener {self.port} {HOST}",
            "persistence true",
            f"persistence_location {self.directory}/",
            "autosave_interval 0",
            f"log_dest file {self.log_path}",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "max_queued_messages 100000",
        ]
        if os.geteuid() == 0:
            lines.append("user root")  # else it drops to 'mosquitto', who cannot write here
        if self.users:
            passwords = self.directory / "passwords"
            passwords.touch()
            for user, password in self.users.items():
                passwd = Path(self.binary).with_name("mosquitto_passwd")
                tool = str(passwd) if passwd.exists() else "mosquitto_passwd"
                subprocess.run([tool, "-b", str(passwords), user, password], check=True)
            lines += ["allow_anonymous false", f"password_file {passwords}"]
        else:
            lines.append("allow_anonymous true")
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        """Start it (again, on the same port) and wait until it accepts connections.
        Raises ``RuntimeError`` with the tail of its log if it does not."""
        self.process = subprocess.Popen(
            [self.binary, "-c", str(self.config_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                socket.create_connection((HOST, self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        log = self.log_path.read_text() if self.log_path.exists() else ""
        self.stop()
        raise RuntimeError(f"mosquitto did not start on port {self.port}: {log[-2000:]}")

    def stop(self) -> None:
        """Stop it (SIGTERM: it saves its persistence file first)."""
        if self.process is not None:
            end_process(self.process, signal.SIGTERM, STOP_TIMEOUT_S)
            self.process = None


def launch(users: Mapping[str, str] | None = None) -> tuple[Mosquitto, Path]:
    """A started broker and its temp directory (the caller stops and removes)."""
    directory = Path(tempfile.mkdtemp(prefix="mediaflow-mosquitto-"))
    broker = Mosquitto(directory, users)
    broker.start()
    return broker, directory


@pytest.fixture
def mosquitto() -> Iterator[Mosquitto]:
    """A broker of the test's own, open to anyone; stopped after the test."""
    broker, directory = launch()
    try:
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def mosquitto_with_users() -> Iterator[Mosquitto]:
    """A broker that lets in only ``home`` with password ``s3cret-Pw``."""
    broker, directory = launch({"home": "s3cret-Pw"})
    try:
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)
