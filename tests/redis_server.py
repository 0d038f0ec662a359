"""A real Redis for tests: Debian's ``redis-server`` on a free loopback port. No fakeredis.

Registered as a plugin by ``tests/conftest.py``; its fixtures:

- ``redis_server`` (session): one server for the whole run, started on first use
  (``--bind 127.0.0.1 --save '' --appendonly no``, data in a temp dir) and stopped
  when the session ends. Tests share it: each keeps to its own keys (a key prefix) or
  asks for ``fresh_redis``.
- ``fresh_redis`` (per test): the session server, running (started again if an
  earlier test stopped it) and emptied (FLUSHALL) before the test.
- ``durable_redis_server`` (per test): a server of the test's own with
  ``--appendonly yes --appendfsync always``, for "Redis restarted mid-stream" tests:
  :meth:`RedisServer.restart` (SIGTERM) and :meth:`RedisServer.kill` (SIGKILL, a
  crash) keep every write Redis acknowledged. Stopped after the test.

:func:`session_redis_server` hands out the session server without a fixture (the
queue backend opener in ``tests/conftest.py`` is also called from a Hypothesis test);
:func:`launch` starts more servers. Everything here talks to Redis over a plain
socket (RESP), so it works without redis-py; the tests use redis-py as a client.

Skipped (with the reason) only when ``redis-server`` is not on PATH; in CI a skip
fails the run (``tests/ci_skips.py``). Needs the Debian package ``redis-server``.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.process_control import end_process

HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0  # then SIGKILL
PORT_ATTEMPTS = 5  # a free port picked here may be taken before redis-server binds it
MISSING = "redis-server is not installed (apt-get install redis-server)"


class RedisReplyError(Exception):
    """Redis answered a command with an error (``-ERR ...``)."""


class RedisStartError(RuntimeError):
    """``redis-server`` exited or did not answer PING in time; the message ends
    with the tail of its log."""


def redis_binary() -> str:
    """The ``redis-server`` on PATH; skips the calling test when there is none."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip(MISSING)
    return binary


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


# -- RESP over a plain socket ----------------------------------------------------


def _encode(args: tuple[str | bytes | int, ...]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _read_reply(stream: Any) -> Any:
    """One RESP2 reply: str (status), int, bytes or None (bulk), list (array);
    raises :class:`RedisReplyError` for an error reply."""
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError(f"redis closed the connection mid-reply ({line!r})")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisReplyError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else stream.read(size + 2)[:-2]
    if kind == b"*":
        count = int(rest)
        return None if count < 0 else [_read_reply(stream) for _ in range(count)]
    raise ConnectionError(f"not a RESP reply: {line!r}")


def send_command(port: int, *args: str | bytes | int, timeout: float = 5.0) -> Any:
    """Send one command to the Redis on ``HOST:port`` on a new connection and
    return its reply (see :func:`_read_reply`). Raises ``OSError`` if nothing
    answers there."""
    with socket.create_connection((HOST, port), timeout=timeout) as conn:
        conn.sendall(_encode(args))
        with conn.makefile("rb") as stream:
            return _read_reply(stream)


# -- a server ----------------------------------------------------------------------


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:port`` with its data in ``directory``.

    :meth:`stop` then :meth:`start` (or :meth:`restart`) brings it back on the same
    port and directory, so clients keep their URL; without ``appendonly`` it comes
    back empty (``--save ''``: nothing is written on shutdown). Methods block (they
    wait for the process); call them from a thread in async code if the loop must
    keep running meanwhile.
    """

    def __init__(
        self, binary: str, directory: Path, *, port: int | None = None, appendonly: bool = False
    ) -> None:
        self.binary = binary
        self.directory = directory
        self.port = port if port is not None else free_port()
        self.appendonly = appendonly
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``, what ``MEDIAFLOW_QUEUE`` takes."""
        return self.url_for(0)

    def url_for(self, db: int) -> str:
        return f"redis://{HOST}:{self.port}/{db}"

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    @property
    def stderr_path(self) -> Path:
        return self.directory / "redis.stderr"

    @property
    def pid(self) -> int | None:
        """The process id while it runs, else None."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def argv(self) -> list[str]:
        argv = [
            self.binary,
            "--port", str(self.port),
            "--bind", HOST,
            "--dir", str(self.directory),
            "--logfile", str(self.log_path),
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
        ]  # fmt: skip
        if self.appendonly:
            # fsync each write before answering: a SIGKILL then loses nothing acknowledged.
            argv += ["--appendfsync", "always"]
        return argv

    def start(self) -> None:
        """Start the process and return once it answers PING.

        Raises ``RuntimeError`` if it runs already, :class:`RedisStartError` if it
        exits (e.g. its port is taken) or does not answer within ``START_TIMEOUT_S``.
        """
        if self.running:
            raise RuntimeError(f"redis-server on port {self.port} is running already")
        self.directory.mkdir(parents=True, exist_ok=True)
        # Early errors (a bad option) go to stderr before the log file is open.
        with self.stderr_path.open("ab") as stderr:
            self._process = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
            )
        try:
            self._wait_until_answering(self._process)
        except BaseException:
            self._end(signal.SIGKILL)
            raise

    def ensure_running(self) -> None:
        """Start it unless it runs (e.g. an earlier test stopped it and failed)."""
        if not self.running:
            self.start()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (Redis shuts down cleanly: with ``appendonly`` every write is on
        disk), then SIGKILL if it has not exited after ``timeout_s``. Returns once
        the process is gone and reaped; does nothing if it is not running."""
        self._end(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """SIGKILL: a crash. Returns once the process is gone and reaped."""
        self._end(signal.SIGKILL)

    def restart(self) -> None:
        """:meth:`stop`, then :meth:`start` on the same port and directory."""
        self.stop()
        self.start()

    def command(self, *args: str | bytes | int) -> Any:
        """One command's reply (see :func:`send_command`)."""
        return send_command(self.port, *args)

    def ping(self) -> bool:
        """Whether it answers PING with PONG now."""
        try:
            return bool(self.command("PING") == "PONG")
        except (OSError, RedisReplyError):
            return False

    def flush(self) -> None:
        """Delete every key of every database (FLUSHALL)."""
        self.command("FLUSHALL")

    def dbsize(self, db: int = 0) -> int:
        """How many keys database ``db`` holds."""
        with socket.create_connection((HOST, self.port), timeout=5.0) as conn:
            conn.sendall(_encode(("SELECT", db)) + _encode(("DBSIZE",)))
            with conn.makefile("rb") as stream:
                _read_reply(stream)
                size: int = _read_reply(stream)
                return size

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of its stderr and its log, for error messages."""
        tails = []
        for path in (self.stderr_path, self.log_path):
            with contextlib.suppress(FileNotFoundError):
                tails += path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(tails) or "(nothing logged)"

    def _answers_as(self, pid: int) -> bool:
        """Whether the process ``pid`` answers PING on our port: not another server
        that holds the port (ours then exits), nor ours while it loads its data."""
        try:
            with socket.create_connection((HOST, self.port), timeout=1.0) as conn:
                conn.sendall(_encode(("PING",)) + _encode(("INFO", "server")))
                with conn.makefile("rb") as stream:
                    pong, info = _read_reply(stream), _read_reply(stream)
        except (OSError, RedisReplyError):  # not listening yet, or -LOADING
            return False
        return pong == "PONG" and f"process_id:{pid}\r\n".encode() in info

    def _wait_until_answering(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._answers_as(process.pid):
                return
            if process.poll() is not None:
                raise RedisStartError(
                    f"redis-server on port {self.port} exited with {process.returncode}:\n"
                    f"{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RedisStartError(
                    f"redis-server on port {self.port} did not answer PING within"
                    f" {START_TIMEOUT_S} s\n{self.log_tail()}"
                )
            time.sleep(0.01)

    def _end(self, sig: signal.Signals, timeout_s: float = STOP_TIMEOUT_S) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        end_process(process, sig, timeout_s)


def launch(directory: Path, *, appendonly: bool = False) -> RedisServer:
    """Start a ``redis-server`` with its data in ``directory`` on a free loopback
    port and return it once it answers. Skips the calling test when ``redis-server``
    is not installed; tries another port if the one picked was taken meanwhile."""
    binary = redis_binary()
    for attempt in range(PORT_ATTEMPTS):
        server = RedisServer(binary, directory, appendonly=appendonly)
        try:
            server.start()
        except RedisStartError as error:
            if "Address already in use" not in str(error) or attempt == PORT_ATTEMPTS - 1:
                raise
            continue
        return server
    raise AssertionError("unreachable")


@contextlib.contextmanager
def running_redis(directory: Path, *, appendonly: bool = False) -> Iterator[RedisServer]:
    """:func:`launch`, then stop the server (SIGTERM, SIGKILL if need be) on the way out."""
    server = launch(directory, appendonly=appendonly)
    try:
        yield server
    finally:
        server.stop()


# -- the session's server ----------------------------------------------------------

_session: list[tuple[RedisServer, Path]] = []  # at most one: the server and its temp dir


def session_redis_server() -> RedisServer:
    """The session's server, started on first use and running (see ``redis_server``).
    Skips the calling test when ``redis-server`` is not installed."""
    if not _session:
        place = Path(tempfile.mkdtemp(prefix="mf-redis-"))
        try:
            server = launch(place)
        except BaseException:
            shutil.rmtree(place, ignore_errors=True)
            raise
        _session.append((server, place))
        atexit.register(stop_session_redis_server)  # in case pytest never unconfigures
    server = _session[0][0]
    server.ensure_running()
    return server


def stop_session_redis_server() -> None:
    """Stop the session's server, if one was started, and delete its data."""
    while _session:
        server, place = _session.pop()
        server.stop()
        shutil.rmtree(place, ignore_errors=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    stop_session_redis_server()


@pytest.fixture(scope="session", name="redis_server")
def redis_server_fixture() -> RedisServer:
    """The session's ``redis-server`` (``--appendonly no``); stopped when the session ends."""
    return session_redis_server()


@pytest.fixture(name="fresh_redis")
def fresh_redis_fixture(redis_server: RedisServer) -> RedisServer:
    """The session's server, running and empty (FLUSHALL) at the start of the test."""
    redis_server.ensure_running()
    redis_server.flush()
    return redis_server


@pytest.fixture(name="durable_redis_server")
def durable_redis_server_fixture(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of this test's own with ``--appendonly yes --appendfsync always``."""
    with running_redis(tmp_path / "redis", appendonly=True) as server:
        yield server
