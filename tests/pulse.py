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

``pulse_source`` is a microphone that can be unplugged and plugged in again, alone on a
PulseAudio daemon of its own (``pulse_source_server``, one per test module), that
PortAudio lists by name (see :class:`PulseSource`). Import both fixtures the same way.

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
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SINK = "t"
SINK_RATE = 48000
START_TIMEOUT_S = 15.0
SOURCE = "mediaflow_mic"  # pulse_source's PortAudio device (and PulseAudio sink)
# alsa-lib's configuration when ALSA_CONFIG_PATH is unset (it loads asoundrc and conf.d).
ALSA_CONFIG = "/usr/share/alsa/alsa.conf"


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


def _start_daemon(binary: str, env: dict[str, str], *modules: str) -> None:
    """Start a PulseAudio daemon in ``env``'s ``XDG_RUNTIME_DIR`` with the native protocol
    and ``modules`` loaded; return once it answers. Raises ``RuntimeError``."""
    started = subprocess.run(
        [
            binary,
            "-D",
            "--system=false",
            "--exit-idle-time=-1",
            "--disallow-exit",
            "-n",
            "--load=module-native-protocol-unix",
            *(f"--load={module}" for module in modules),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )
    if started.returncode != 0:
        raise RuntimeError(f"pulseaudio failed to start: {started.stderr}")
    _wait_until_answering(env)


def _stop_daemon(binary: str, runtime_dir: Path, env: dict[str, str]) -> None:
    """Stop the daemon of ``runtime_dir`` (if it runs) and wait for it to exit."""
    pid_file = runtime_dir / "pulse" / "pid"
    pid = int(pid_file.read_text().strip()) if pid_file.exists() else None
    subprocess.run([binary, "--kill"], env=env, capture_output=True, timeout=10)
    if pid is not None:
        _wait_for_exit(pid)


def _runtime_dir(prefix: str) -> Path:
    # A short path under /tmp: the socket path must fit in sun_path (108 bytes).
    runtime_dir = Path(tempfile.mkdtemp(prefix=prefix))
    runtime_dir.chmod(0o700)
    return runtime_dir


@pytest.fixture(scope="session", name="pulse_server")
def pulse_server() -> Iterator[PulseServer]:
    """Start PulseAudio with a null sink for the session; stop it afterwards."""
    binary = shutil.which("pulseaudio")
    if binary is None:
        pytest.skip("pulseaudio is not installed (apt-get install pulseaudio pulseaudio-utils)")
    runtime_dir = _runtime_dir("mf-pulse-")
    previous = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime_dir)
    env = dict(os.environ)
    try:
        _start_daemon(binary, env, f"module-null-sink sink_name={SINK} rate={SINK_RATE}")
        server = PulseServer(runtime_dir, SINK, f"{SINK}.monitor", env)
        server.pactl("set-default-source", server.source)
        server.pactl("set-default-sink", server.sink)
        _rescan_portaudio()
        yield server
    finally:
        _stop_daemon(binary, runtime_dir, env)
        if previous is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = previous
        shutil.rmtree(runtime_dir, ignore_errors=True)


@dataclass
class PulseSource:
    """A microphone that can be unplugged and plugged in again, alone on its own server.

    PortAudio device ``name`` captures from PulseAudio source ``name.monitor``, the
    monitor of null sink ``name`` on a PulseAudio daemon of its own (``server``) that has
    no other sink or source. :meth:`plug` loads the sink and plays a WAV file into it
    (what the microphone hears); :meth:`unplug` unloads it. A capture stream then has
    no source left to be moved to, so PulseAudio ends it, and PortAudio's stream stops,
    as when a USB microphone is pulled. Where another source exists
    (:meth:`add_fallback`), PulseAudio moves the stream there instead, silently, and
    back when the source returns.

    Debian's PortAudio (19.6) has no PulseAudio host API: it reaches the source through
    an ALSA PCM called ``name`` of type ``pulse`` (with this server and source), which
    the ``pulse_source`` fixture defines. PortAudio lists that PCM whether or not the
    source exists; opening it while the source is unplugged fails (PulseAudio answers
    "No such entity").
    """

    server: PulseServer
    name: str
    module: str | None = None
    player: subprocess.Popen[bytes] | None = None
    others: list[str] = field(default_factory=list)  # modules of add_fallback

    def plug(self, tone: Path, *, rate: int = SINK_RATE) -> None:
        """Load the sink (its monitor source exists when this returns), at ``rate`` Hz,
        and start playing ``tone`` into it. Raises if it is plugged in already."""
        if self.module is not None:
            raise RuntimeError(f"{self.name} is plugged in already")
        loaded = self.server.pactl(
            "load-module", "module-null-sink", f"sink_name={self.server.sink}", f"rate={rate}"
        )
        self.module = loaded.stdout.strip()
        self.player = self.server.play(tone)

    def unplug(self) -> None:
        """Stop the player and unload the sink and its source; they are gone when this
        returns. Raises if it is unplugged already."""
        if self.module is None:
            raise RuntimeError(f"{self.name} is unplugged already")
        if self.player is not None:
            self.player.kill()
            self.player.communicate(timeout=10)
            self.player = None
        module, self.module = self.module, None
        self.server.pactl("unload-module", module)

    def add_fallback(self, name: str = "fallback") -> None:
        """Give the server another (silent) source, ``name.monitor``, for PulseAudio to
        move capture streams to; the fixture removes it after the test."""
        loaded = self.server.pactl("load-module", "module-null-sink", f"sink_name={name}")
        self.others.append(loaded.stdout.strip())

    def sources(self) -> list[str]:
        """The names of the sources the server has now."""
        listed = self.server.pactl("list", "short", "sources").stdout
        return [line.split("\t")[1] for line in listed.splitlines() if "\t" in line]

    def reset(self) -> None:
        """Unplug and remove the fallbacks: the server has no source left."""
        if self.module is not None:
            self.unplug()
        while self.others:
            self.server.pactl("unload-module", self.others.pop())


@pytest.fixture(scope="module", name="pulse_source_server")
def pulse_source_server() -> Iterator[PulseServer]:
    """The daemon of ``pulse_source``, for a module's tests (it takes ~1.5 s to stop).

    Starts it without sinks or sources, defines the ALSA PCM :data:`SOURCE` in a file
    that ``ALSA_CONFIG_PATH`` names after alsa-lib's own configuration, and re-initialises
    PortAudio so it lists the device; afterwards restores ``ALSA_CONFIG_PATH``,
    re-initialises PortAudio and stops the daemon. No PortAudio stream may be open at
    either end.
    """
    binary = shutil.which("pulseaudio")
    if binary is None or shutil.which("paplay") is None:
        pytest.skip("pulseaudio is not installed (apt-get install pulseaudio pulseaudio-utils)")
    runtime_dir = _runtime_dir("mf-mic-")
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir)}
    conf = runtime_dir / "asound.conf"
    conf.write_text(
        f"pcm.{SOURCE} {{\n"
        f"    type pulse\n"
        f'    server "unix:{runtime_dir}/pulse/native"\n'
        f'    device "{SOURCE}.monitor"\n'
        f'    hint {{ show on description "mediaflow test microphone" }}\n'
        f"}}\n"
    )
    previous = os.environ.get("ALSA_CONFIG_PATH")
    try:
        _start_daemon(binary, env)
        os.environ["ALSA_CONFIG_PATH"] = f"{previous or ALSA_CONFIG}:{conf}"
        _rescan_portaudio()
        yield PulseServer(runtime_dir, SOURCE, f"{SOURCE}.monitor", env)
    finally:
        if previous is None:
            os.environ.pop("ALSA_CONFIG_PATH", None)
        else:
            os.environ["ALSA_CONFIG_PATH"] = previous
        _rescan_portaudio()
        _stop_daemon(binary, runtime_dir, env)
        shutil.rmtree(runtime_dir, ignore_errors=True)


@pytest.fixture(name="pulse_source")
def pulse_source(pulse_source_server: PulseServer) -> Iterator[PulseSource]:
    """A :class:`PulseSource` named :data:`SOURCE`, unplugged: the test plugs it in.
    Import ``pulse_source_server`` into the test module too. Reset after the test."""
    source = PulseSource(pulse_source_server, SOURCE)
    try:
        yield source
    finally:
        source.reset()
