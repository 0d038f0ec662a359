"""A flow file run by ``mediaflow run`` as a child process, as an operator would run it.

:class:`FlowProcess` starts ``python -m mediaflow run FLOW --data DIR --port 0`` on the
embedded queue and a local store, with the disk cap (``ARTIFACT_MAX_BYTES``) and a
short periodic sweep (``ARTIFACT_GC_INTERVAL_S``, ``ARTIFACT_GC_GRACE_S``) in its
environment and its log in a file, finds the server's URL in that log, and stops it
with SIGINT as Ctrl-C would. The soak and the scale benchmark both run their flows so.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench._lib.common import REPO_ROOT

SERVING = re.compile(r"serving on (http://127\.0\.0\.1:\d+)")


@dataclass(frozen=True)
class GcEnv:
    """The run's GC settings: the cap, and a sweep every few seconds with a short grace."""

    max_bytes: int
    interval_s: float = 10.0
    grace_s: float = 30.0
    cap_check_s: float = 1.0

    def environ(self) -> dict[str, str]:
        return {
            "ARTIFACT_MAX_BYTES": str(self.max_bytes),
            "ARTIFACT_GC_INTERVAL_S": str(self.interval_s),
            "ARTIFACT_GC_GRACE_S": str(self.grace_s),
            "ARTIFACT_CAP_CHECK_S": str(self.cap_check_s),
        }


class FlowProcess:
    """``mediaflow run`` as a child process; a context manager that always stops it."""

    def __init__(self, flow_file: Path, data_dir: Path, gc: GcEnv, *, limit_s: float) -> None:
        """``limit_s`` is a backstop (``--for``): the caller stops the run before it."""
        self.data_dir = data_dir
        self.log_path = data_dir.parent / "mediaflow.log"
        # The embedded queue and a local store in data_dir, whatever this shell says.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ARTIFACT_")}
        for name in ("MEDIAFLOW_QUEUE", "MEDIAFLOW_STORE", "MEDIAFLOW_TOKEN"):
            env.pop(name, None)
        env.update(gc.environ())
        command = [sys.executable, "-m", "mediaflow", "run", str(flow_file), "--data"]
        command += [str(data_dir), "--port", "0", "--for", f"{limit_s:.0f}"]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the child
        self.proc = subprocess.Popen(
            command, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO_ROOT
        )
        self.url: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_serving(self, timeout_s: float = 60.0) -> str:
        """The wall's URL once the log says it serves. Raises ``RuntimeError`` with the
        log's tail if the process exits first or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = SERVING.search(self.log_text())
            if found:
                self.url = found.group(1)
                return self.url
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"mediaflow run did not start serving:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGINT (a clean stop), then SIGKILL past ``timeout_s``; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> FlowProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
