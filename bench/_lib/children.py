"""Child processes a benchmark starts on loopback (a server, a broker, a flow): a free
port to give one, and stopping one the way an operator would, then for good."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

HOST = "127.0.0.1"
STOP_S = 30.0  # then SIGKILL


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def stop_child(proc: subprocess.Popen[bytes] | None, timeout_s: float = STOP_S) -> int | None:
    """SIGTERM, SIGKILL past ``timeout_s``; the exit status (None if never started)."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any ``MEDIAFLOW_*`` or ``ARTIFACT_*``, plus ``extra``:
    a child runs with the settings the benchmark gives it, not the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDIAFLOW_", "ARTIFACT_"))}
    env.update(extra)
    return env


class LoggedChild:
    """A child process that writes its output to ``log``: what a benchmark asks of
    a flow it started (its pid, its end, a clean stop, its log)."""

    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout_s: float) -> int | None:
        """Its exit status once it ends on its own; None if it runs past ``timeout_s``."""
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> int | None:
        """SIGTERM (a clean stop), SIGKILL past a while; the exit status."""
        return stop_child(self.proc, 60.0)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")
