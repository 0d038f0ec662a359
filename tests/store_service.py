"""A real artifact service for the remote-store tests: ``mediaflow serve`` in a child
process on a loopback port (``--port 0`` picks a free one; the URL is read from its
``serving on`` line), with a token and its own data directory.

No tests live here; ``tests/test_remote_store*.py`` import :func:`start_service`.
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

from mediaflow.store import ArtifactStore

REPO = Path(__file__).resolve().parent.parent
TOKEN = "remote-store-test-token"
START_TIMEOUT_S = 20.0
_SERVING = re.compile(r"serving on (http://127\.0\.0\.1:\d+)")
# The child must not inherit settings that would change what it serves.
_CLEARED = ("MEDIAFLOW_STORE", "MEDIAFLOW_QUEUE", "MEDIAFLOW_LOCK_READS", "MEDIAFLOW_DATA")


@dataclass
class Service:
    """A running ``mediaflow serve``: its URL, data directory and process."""

    url: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log: Path

    def has(self, digest: str) -> bool:
        """Whether the service's own directory holds ``digest`` (read from its disk)."""
        return self.local_path(digest).is_file()

    def local_path(self, digest: str) -> Path:
        return ArtifactStore(self.data_dir).local_path(digest)

    def stored_digests(self) -> set[str]:
        return stored_digests(self.data_dir)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 10 s). Idempotent."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_service(place: Path, *, port: int = 0, **env: str) -> Service:
    """Start ``mediaflow serve --port PORT`` (0: a free one) with data in
    ``place / "service"`` and ``MEDIAFLOW_TOKEN=TOKEN`` (plus ``env``); return once
    it listens."""
    place.mkdir(parents=True, exist_ok=True)
    data_dir = place / "service"
    log = place / "service.log"
    child_env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    child_env.update(MEDIAFLOW_TOKEN=TOKEN, ARTIFACT_GC_INTERVAL_S="0", **env)
    serve = ["serve", "--port", str(port), "--data", str(data_dir)]
    argv = [sys.executable, "-m", "mediaflow", *serve]
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        found = _SERVING.search(log.read_text(errors="replace"))
        if found is not None:
            return Service(found.group(1), data_dir, process, log)
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"mediaflow serve did not start:\n{log.read_text()}")
        time.sleep(0.01)


def stored_digests(data_dir: Path) -> set[str]:
    """Every artifact file in a store directory (fan-out directories, no temp files)."""
    root = data_dir / "artifacts"
    if not root.exists():
        return set()
    return {
        "sha256:" + path.name
        for path in root.rglob("*")
        if path.is_file() and path.parent.name != "tmp" and len(path.name) == 64
    }


def temp_files(data_dir: Path) -> list[Path]:
    tmp = data_dir / "artifacts" / "tmp"
    return list(tmp.iterdir()) if tmp.exists() else []
