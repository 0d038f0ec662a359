"""A real RTSP server for tests: GStreamer's GstRtspServer stands in for IP cameras.

Registered as a plugin by ``tests/conftest.py``; its fixture:

- ``rtsp_server`` (per test): a factory, ``start(*mounts) -> RtspServer``, that starts
  one server process on a free loopback port per call, serving each :class:`Mount`
  (an MP4 file from :func:`rtsp_media`, sent as H.264 or H.265 with AAC, G.711
  mu-law or no audio, optionally behind Basic authentication). Every server it
  started is stopped after the test.

The server is ``tests/gst_rtsp_serve.py``, run by Debian's ``/usr/bin/python3``: the
GStreamer bindings (``gi``) exist only there, not in the project's venv. Clients
(PyAV, FFmpeg) choose RTP over TCP (interleaved) or UDP with ``rtsp_transport``. A
mount's media is shared: the first client starts the file from its beginning, later
ones join it live, like a camera; it plays once, so ask :func:`rtsp_media` for as
many ``seconds`` as the test needs (when the last client leaves, the next one starts
the file again). An :class:`RtspServer` fails like a camera: :meth:`~RtspServer.kill`
(power lost), :meth:`~RtspServer.pause` (stalled), :meth:`~RtspServer.restart` (back
on the same port, maybe with other media).

:func:`launch` starts a server without pytest (a benchmark reuses it). No server
outlives the interpreter (an ``atexit`` guard), and the media files and server logs
live in one temp dir deleted at exit.

Skipped (with the reason) when ``/usr/bin/python3`` cannot import ``GstRtspServer``
1.0 or GStreamer lacks an element the mounts use; in CI a skip fails the run
(``tests/ci_skips.py``). Needs the Debian packages ``gir1.2-gst-rtsp-server-1.0
python3-gi gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-libav``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import quote

import pytest

from tests.process_control import end_process
from tests.rtsp_media import VideoCodec, on_exit, rtsp_media, session_dir

__all__ = [
    "Mount",
    "RtspServer",
    "RtspServerFactory",
    "RtspStartError",
    "RtspUnavailableError",
    "gst_rtsp_missing",
    "launch",
    "rtsp_media",
]

HOST = "127.0.0.1"
SERVER_PYTHON = "/usr/bin/python3"  # Debian's: the one with gi and GstRtspServer
SERVE_SCRIPT = Path(__file__).with_name("gst_rtsp_serve.py")
START_TIMEOUT_S = 15.0  # Gst.init and a few parse_launch: ~0.3 s here, more on a busy CI box
STOP_TIMEOUT_S = 5.0  # then SIGKILL
PROBE_TIMEOUT_S = 30.0
PACKAGES = (
    "gir1.2-gst-rtsp-server-1.0 python3-gi gstreamer1.0-plugins-good"
    " gstreamer1.0-plugins-bad gstreamer1.0-libav"
)
MISSING = f"GStreamer's RTSP server is missing for {SERVER_PYTHON} (apt-get install {PACKAGES})"
# What the mounts' launch lines use: h264parse and h265parse are in plugins-bad,
# avdec_aac in libav, the rest in plugins-good (plugins-base: audioconvert, audioresample).
ELEMENTS = (
    "filesrc qtdemux queue h264parse h265parse rtph264pay rtph265pay aacparse rtpmp4gpay"
    " avdec_aac audioconvert audioresample mulawenc rtppcmupay"
)
_PROBE = f"""
import gi
gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import Gst, GstRtspServer
Gst.init(None)
missing = [e for e in "{ELEMENTS}".split() if Gst.ElementFactory.find(e) is None]
print(" ".join(missing))
"""

AudioCodec = Literal["aac", "pcmu"]


class RtspStartError(RuntimeError):
    """The server exited or did not print ``ready PORT`` in time; the message ends
    with the tail of its stderr."""


class RtspUnavailableError(RuntimeError):
    """``/usr/bin/python3`` has no GstRtspServer, or GStreamer lacks an element the
    mounts use (the message names the packages to install)."""


@functools.cache
def gst_rtsp_missing() -> str | None:
    """Why no server can run here (:data:`MISSING` and what failed), or None when
    ``/usr/bin/python3`` imports GstRtspServer 1.0 and GStreamer has every element in
    :data:`ELEMENTS`. Asks a subprocess once per interpreter; blocks meanwhile."""
    if not os.access(SERVER_PYTHON, os.X_OK):
        return f"{MISSING}: no {SERVER_PYTHON}"
    try:
        probe = subprocess.run(
            [SERVER_PYTHON, "-I", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{MISSING}: importing it took over {PROBE_TIMEOUT_S} s"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        return f"{MISSING}: {last}"
    if probe.stdout.strip():
        return f"{MISSING}: no GStreamer element {probe.stdout.strip()}"
    return None


_live: dict[int, RtspServer] = {}  # pid -> a server whose process runs


# -- mounts ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mount:
    """One stream a server offers at ``rtsp://HOST:PORT{path}``: the file ``media``
    (from :func:`rtsp_media`; ``video`` must name its codec) as RTP payload ``pay0``,
    and its audio as ``pay1``: AAC as is, ``"pcmu"`` (decoded and sent as G.711
    mu-law, 8 kHz mono, like many cameras), or none. With ``user`` and ``password``
    the server answers 401 with a Basic challenge to a request without them.

    Raises ``ValueError`` for a path not starting with "/", an unknown codec, or only
    one of ``user`` and ``password``."""

    path: str = "/cam"
    media: Path
    video: VideoCodec = "h264"
    audio: AudioCodec | None = "aac"
    user: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        if not self.path.startswith("/"):
            raise ValueError(f"a mount's path must start with '/', not {self.path!r}")
        if self.video not in ("h264", "h265"):
            raise ValueError(f"video must be 'h264' or 'h265', not {self.video!r}")
        if self.audio not in ("aac", "pcmu", None):
            raise ValueError(f"audio must be 'aac', 'pcmu' or None, not {self.audio!r}")
        if (self.user is None) != (self.password is None):
            raise ValueError("give a mount both a user and a password, or neither")

    def launch_line(self) -> str:
        """The mount's pipeline in ``gst-launch`` syntax, in parentheses as
        GstRtspServer's media factories take it."""
        parse = "h264parse" if self.video == "h264" else "h265parse"
        pay = "rtph264pay" if self.video == "h264" else "rtph265pay"
        # config-interval=-1: parameter sets before every IDR, so a client that joins
        # the shared stream late can decode from its next keyframe.
        parts = [
            f"filesrc location={_quoted(self.media)} ! qtdemux name=d",
            f"d.video_0 ! queue ! {parse} config-interval=-1 ! {pay} name=pay0 pt=96",
        ]
        if self.audio == "aac":
            parts.append("d.audio_0 ! queue ! aacparse ! rtpmp4gpay name=pay1 pt=97")
        elif self.audio == "pcmu":
            parts.append(
                "d.audio_0 ! queue ! aacparse ! avdec_aac ! audioconvert ! audioresample"
                " ! audio/x-raw,rate=8000,channels=1 ! mulawenc ! rtppcmupay name=pay1"
            )
        return f"( {' '.join(parts)} )"

    def config(self) -> dict[str, Any]:
        """The mount as ``tests/gst_rtsp_serve.py`` takes it (JSON-ready)."""
        return {
            "path": self.path,
            "launch": self.launch_line(),
            "user": self.user,
            "password": self.password,
        }


def _quoted(path: Path) -> str:
    """``path`` as one gst-launch property value: double quotes, with backslashes and
    double quotes escaped (GStreamer's parser unescapes them)."""
    text = str(path.resolve()).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


# -- a server ----------------------------------------------------------------------


class RtspServer:
    """One ``tests/gst_rtsp_serve.py`` process serving ``mounts`` on ``127.0.0.1:port``.

    ``port`` 0 lets the first :meth:`start` pick a free one; from then on the server
    keeps it, so :meth:`restart` (also after :meth:`kill`) comes back where clients
    look for it. Methods block (they wait for the process); call them from a thread
    in async code if the loop must keep running meanwhile.
    """

    def __init__(self, mounts: Sequence[Mount], *, port: int = 0) -> None:
        self.mounts = _checked(mounts)
        self._port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._paused = False
        self.stderr_path = session_dir() / f"rtsp-{id(self):x}-{time.monotonic_ns()}.stderr"

    @property
    def port(self) -> int:
        """The port it listens on; ``RuntimeError`` before the first :meth:`start`
        when it was made with port 0."""
        if self._port == 0:
            raise RuntimeError("the server has no port before its first start")
        return self._port

    @property
    def pid(self) -> int | None:
        """The process id while it runs (paused too), else None."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether its process is alive (a paused one is)."""
        return self._process is not None and self._process.poll() is None

    @property
    def paused(self) -> bool:
        """Whether :meth:`pause` stopped it and :meth:`resume` has not continued it."""
        return self.running and self._paused

    def url(
        self, path: str = "/cam", *, user: str | None = None, password: str | None = None
    ) -> str:
        """``rtsp://[user[:password]@]127.0.0.1:PORT{path}``, the credentials
        percent-encoded. Raises ``ValueError`` for a password without a user or a
        path not starting with "/", ``RuntimeError`` before the first start."""
        if not path.startswith("/"):
            raise ValueError(f"path must start with '/', not {path!r}")
        if password is not None and user is None:
            raise ValueError("a password needs a user")
        userinfo = ""
        if user is not None:
            userinfo = quote(user, safe="")
            if password is not None:
                userinfo += ":" + quote(password, safe="")
            userinfo += "@"
        return f"rtsp://{userinfo}{HOST}:{self.port}{path}"

    def start(self) -> None:
        """Start the process and return once it listens (it printed ``ready PORT``).

        Raises ``RuntimeError`` if it runs already, :class:`RtspStartError` if it exits
        (its port is taken, a launch line does not build) or is not ready within
        ``START_TIMEOUT_S``; the process is gone then."""
        if self.running:
            raise RuntimeError(f"the RTSP server on port {self._port} is running already")
        self._end(signal.SIGKILL)  # reap a process that exited on its own, close its pipes
        config = {"port": self._port, "mounts": [mount.config() for mount in self.mounts]}
        argv = [SERVER_PYTHON, "-I", str(SERVE_SCRIPT), json.dumps(config)]
        with self.stderr_path.open("ab") as stderr:
            # stdin: a pipe the server watches, so that it ends if this process dies
            process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
            )
        self._process, self._paused = process, False
        _live[process.pid] = self
        try:
            self._port = self._wait_until_ready(process)
        except BaseException:
            self._end(signal.SIGKILL)
            raise

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM and SIGCONT (a paused process acts on SIGTERM only once continued),
        then SIGKILL if it has not exited after ``timeout_s``. Returns once the process
        is gone and reaped; does nothing if it is not running. Clients see their
        connections end."""
        self._end(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """SIGKILL: a camera losing power. Returns once the process is gone and reaped."""
        self._end(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: a stalled camera. Connections stay open and new ones are accepted
        by the kernel, but nothing is answered or sent until :meth:`resume`. Raises
        ``RuntimeError`` if it is not running."""
        self._signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`. Raises ``RuntimeError`` if it is not running."""
        self._signal(signal.SIGCONT)
        self._paused = False

    def restart(self, mounts: Sequence[Mount] | None = None) -> None:
        """:meth:`stop` (if it runs), then :meth:`start` on the same port, serving
        ``mounts`` instead when given. Raises like :meth:`start`, and ``ValueError``
        for mounts with the same path."""
        self.stop()
        if mounts is not None:
            self.mounts = _checked(mounts)
        self.start()

    def stderr_tail(self, lines: int = 20) -> str:
        """The last lines its processes wrote to stderr, for error messages."""
        with contextlib.suppress(FileNotFoundError):
            tail = self.stderr_path.read_text(errors="replace").splitlines()[-lines:]
            return "\n".join(tail) or "(nothing on stderr)"
        return "(nothing on stderr)"

    def _signal(self, sig: signal.Signals) -> None:
        if self._process is None or not self.running:
            raise RuntimeError("the RTSP server is not running")
        self._process.send_signal(sig)

    def _wait_until_ready(self, process: subprocess.Popen[bytes]) -> int:
        """The port from the process's ``ready PORT`` line; raises RtspStartError."""
        if process.stdout is None:
            raise RuntimeError("the server's stdout is not a pipe")
        fd, line, deadline = process.stdout.fileno(), b"", time.monotonic() + START_TIMEOUT_S
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RtspStartError(
                    f"the RTSP server did not get ready within {START_TIMEOUT_S} s:\n"
                    f"{self.stderr_tail()}"
                )
            if select.select([fd], [], [], remaining)[0]:
                chunk = os.read(fd, 1)  # one byte: nothing after the line is consumed
                if not chunk:  # stdout closed: it exits
                    process.wait(STOP_TIMEOUT_S)
                    raise RtspStartError(
                        f"the RTSP server (port {self._port or 'any'}) exited with"
                        f" {process.returncode}:\n{self.stderr_tail()}"
                    )
                line += chunk
        match = re.fullmatch(rb"ready (\d+)\n", line)
        if match is None:
            raise RtspStartError(f"the RTSP server said {line!r}:\n{self.stderr_tail()}")
        return int(match[1])

    def _end(self, sig: signal.Signals, timeout_s: float = STOP_TIMEOUT_S) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        end_process(process, sig, timeout_s)
        self._paused = False
        _live.pop(process.pid, None)
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()


def _checked(mounts: Sequence[Mount]) -> list[Mount]:
    paths = [mount.path for mount in mounts]
    if not paths:
        raise ValueError("a server needs at least one mount")
    if len(set(paths)) != len(paths):
        raise ValueError(f"two mounts share a path: {paths}")
    return list(mounts)


def launch(mounts: Sequence[Mount], *, port: int = 0) -> RtspServer:
    """Start a server for ``mounts`` on ``port`` (0: a free one) and return it once it
    listens. Raises :class:`RtspUnavailableError` when GstRtspServer is not installed,
    :class:`RtspStartError` (see :meth:`RtspServer.start`), ``ValueError`` for bad
    mounts. The caller stops it; at the latest it is stopped at exit."""
    reason = gst_rtsp_missing()
    if reason is not None:
        raise RtspUnavailableError(reason)
    server = RtspServer(mounts, port=port)
    server.start()
    return server


def _stop_all() -> None:
    """Stop every server still running (at exit, before the temp dir goes)."""
    for server in list(_live.values()):
        server.stop()


on_exit(_stop_all)


# -- the fixture -------------------------------------------------------------------


class RtspServerFactory(Protocol):
    """What the ``rtsp_server`` fixture returns."""

    def __call__(self, *mounts: Mount) -> RtspServer:
        """Start one more server for ``mounts`` (see :func:`launch`)."""
        ...


@pytest.fixture(name="rtsp_server")
def rtsp_server_fixture() -> Iterator[RtspServerFactory]:
    """``start(*mounts) -> RtspServer``: servers on free loopback ports, each stopped
    (paused ones too) after the test. Skips the test when GstRtspServer is
    not installed for ``/usr/bin/python3``."""
    reason = gst_rtsp_missing()
    if reason is not None:
        pytest.skip(reason)
    servers: list[RtspServer] = []

    def start(*mounts: Mount) -> RtspServer:
        server = launch(mounts)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
