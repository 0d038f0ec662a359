"""A real PulseAudio server with a null sink, for tests that capture sound.

Use it from a test module with::

    from tests.pulse import pulse_server as pulse_server_fixture  # noqa: F401

and request ``pulse_server`` in a test (the fixture is registered under that name
whatever it is imported as; importing it as-is works too, but ruff then reports each
test parameter of that name as a redefinition, F811). The server is started once per session in a
private ``XDG_RUNTIME_DIR`` (set in ``os.environ`` for this process, so PortAudio's ALSA
``pulse``/``default`` devices reach it). Its default source is the null sink's monitor:
whatever :meth:`PulseServer.play` sends into sink ``t`` is what a microphone opened on
``default`` hears. PortAudio enumerates devices once, at initialisation; if
``sounddevice`` was imported before the server ran, the fixture re-initialises it.

Skipped (with the reason) only when the ``pulseaudio`` binary is absent; needs the
Debian packages ``pulseaudio pulseaudio-utils libasound2-plugins libportaudio2``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SINK = "t"
SINK_RATE = 48000
START_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class PulseServer:
    """A running test server: its runtime dir, sink, monitor source and environment."""

    runtime_dir: Path
    sink: str
    source: str
    env: dict[str, str]

    def play(self, wav: Path) -> subprocess.Popen[bytes]:
        """Start ``paplay`` of ``wav`` into the sink; the caller waits on the process."""
        return subprocess.Popen(
            ["paplay", f"--device={self.sink}", str(wav)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def pactl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``pactl`` against this server (raises on failure)."""
        return subprocess.run(
            ["pactl", *args], env=self.env, check=True, capture_output=True, text=True, timeout=10
        )


def _rescan_portaudio() -> None:
    sd = sys.modules.get("sounddevice")
    if sd is not None:
        # PortAudio lists devices at Pa_Initialize; make it look again.
        sd._terminate()
        sd._initialize()


def _wait_until_answering(env: dict[str, str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        probe = subprocess.run(["pactl", "info"], env=env, capture_output=True, timeout=10)
        if probe.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"pulseaudio did not answer: {probe.stderr.decode(errors='replace')}"
            )
        time.sleep(0.1)


def _wait_for_exit(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)  # signal 0: only asks whether the process still exists
        except ProcessLookupError:
            return
        time.sleep(0.05)


@pytest.fixture(scope="session", name="pulse_server")
def pulse_server() -> Iterator[PulseServer]:
    """Start PulseAudio with a null sink for the session; stop it afterwards."""
    binary = shutil.which("pulseaudio")
    if binary is None:
        pytest.skip("pulseaudio is not installed (apt-get install pulseaudio pulseaudio-utils)")
    # A short path under /tmp: the socket path must fit in sun_path (108 bytes).
    runtime_dir = Path(tempfile.mkdtemp(prefix="mf-pulse-"))
    runtime_dir.chmod(0o700)
    previous = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime_dir)
    env = dict(os.environ)
    started = subprocess.run(
        [
            binary,
            "-D",
            "--system=false",
            "--exit-idle-time=-1",
            "--disallow-exit",
            "-n",
            "--load=module-native-protocol-unix",
            f"--load=module-null-sink sink_name={SINK} rate={SINK_RATE}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )
    try:
        if started.returncode != 0:
            raise RuntimeError(f"pulseaudio failed to start: {started.stderr}")
        _wait_until_answering(env)
        server = PulseServer(runtime_dir, SINK, f"{SINK}.monitor", env)
        server.pactl("set-default-source", server.source)
        server.pactl("set-default-sink", server.sink)
        _rescan_portaudio()
        yield server
    finally:
        pid_file = runtime_dir / "pulse" / "pid"
        pid = int(pid_file.read_text().strip()) if pid_file.exists() else None
        subprocess.run([binary, "--kill"], env=env, capture_output=True, timeout=10)
        if pid is not None:
            _wait_for_exit(pid)
        if previous is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = previous
        shutil.rmtree(runtime_dir, ignore_errors=True)
