"""A flow killed with SIGKILL while a slow consumer drains its journaled backlog."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class DrainFlow:
    """``count`` chunks from a fast source to a slow sink that logs each delivery
    (``seq deliveries redelivery``) to ``log_file``; the source writes
    ``done_file`` when it has emitted everything."""

    flow: Path
    data: Path
    log_file: Path
    done_file: Path
    count: int

    @classmethod
    def write(cls, where: Path, count: int) -> DrainFlow:
        log_file, done_file = where / "deliveries.log", where / "source.done"
        flow = where / "drain.toml"
        flow.write_text(
            '[flow]\nname = "drain"\n'
            f'[[node]]\nid = "src"\nuse = "tests.engine_nodes:Counter"\ncount = {count}\n'
            f'done_file = "{done_file}"\n'
            '[[node]]\nid = "sink"\nuse = "tests.engine_nodes:Recorder"\ndelay_s = 0.002\n'
            f'log_file = "{log_file}"\ninputs = {{ chunk = "src.chunk" }}\n'
        )
        return cls(flow, where / "data", log_file, done_file, count)

    def args(self, *extra: str) -> list[str]:
        """The ``mediaflow`` arguments that run the flow until idle (plus ``extra``)."""
        return ["run", str(self.flow), "--until-idle", "--data", str(self.data), *extra]

    def command(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "mediaflow", *self.args(*extra)]

    def run_and_kill(self, env: dict[str, str] | None = None, delivered: int = 200) -> None:
        """Start the run and SIGKILL it once the source is done and at least
        ``delivered`` chunks were delivered (the rest wait on disk)."""
        proc = subprocess.Popen(
            self.command(),
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines = len(self.log_file.read_text().splitlines()) if self.log_file.exists() else 0
            if self.done_file.exists() and lines >= delivered:
                break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
