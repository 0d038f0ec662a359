"""Recognisers in child processes: speech decoding off the GIL.

pocketsphinx keeps the GIL inside every call. In one process, a dozen speech nodes
decoding hold it a third of the time, and every other thread that needs it between
two native calls (a camera's JPEG lane, the event loop saving a frame) waits in a
convoy: measured with ``python -m bench.scale``, one 720p30 camera next to 16 speech
nodes lost a third of its JPEGs at capture while the machine was half idle. So the
built-in engine runs in *recogniser hosts*: a few child processes (``spawn``, one
per core by default: :class:`~mediaflow.config.SpeechSettings`,
``MEDIAFLOW_SPEECH_PROCESSES``), each recogniser living in one host for its whole
life. Their :class:`HostPool` is shared by the speech nodes of a session
(``ctx.more.shared(HostPool.for_settings)``) and closed with it.

:class:`HostedRecognizer` is a :class:`~mediaflow.nodes.recognizer.Recognizer` whose
calls go over a pipe to its host; the node's own thread blocks on the pipe (without
the GIL) while the host decodes. A 100 ms chunk is 3.2 KB each way: the hop costs
tens of microseconds. A host that dies (killed, out of memory) fails the call in
progress with :class:`HostLost`; the recogniser is then rebuilt in a live host, so
the node's retry goes on with a fresh one, as after any recogniser failure (the
utterance in progress is lost). Hosts ignore SIGINT (the parent's clean stop still
needs them to flush) and exit when their pipe closes: at the parent's end, even a
SIGKILLed one. A host with no recogniser left is stopped.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import pickle
import signal
import threading
from multiprocessing.connection import Connection
from typing import Any

from mediaflow.config import EngineSettings
from mediaflow.nodes.recognizer import Recognizer, Result
from mediaflow.nodes.speech_recipe import RecognizerRecipe

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0


class HostLost(RuntimeError):
    """The recogniser host process died; the call's recogniser went with it."""


def serve(conn: Connection) -> None:
    """A host's main loop: requests ``(op, id, arg)`` in, ``(status, value)`` out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    recognizers: dict[int, Recognizer] = {}
    while True:
        try:
            op, rid, arg = conn.recv()
        except (EOFError, OSError):
            return  # the parent closed the pipe, or died
        try:
            conn.send(("ok", _dispatch(recognizers, op, rid, arg)))
        except Exception as exc:
            conn.send(("error", _portable(exc)))


def _dispatch(recognizers: dict[int, Recognizer], op: str, rid: int, arg: Any) -> Any:
    if op == "build":
        recognizers[rid] = arg.build()
        return None
    if op == "close":
        recognizers.pop(rid, None)
        return None
    recognizer = recognizers[rid]
    if op == "feed":
        return recognizer.feed(arg)
    if op == "flush":
        return recognizer.flush()
    if op == "reset":
        recognizer.reset()
        return None
    raise ValueError(f"unknown recogniser host request {op!r}")


def _portable(exc: Exception) -> Exception:
    """``exc`` if it pickles (its type and message then reach the node), else a
    ``RuntimeError`` with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


class RecognizerHost:
    """One child process and the pipe to it; calls are serialised by a lock."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        self._process = context.Process(
            target=serve, args=(theirs,), name="mediaflow-speech", daemon=True
        )
        self._process.start()
        theirs.close()
        self._conn = ours
        self._lock = threading.Lock()
        self.users = 0
        self.lost = False

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def call(self, op: str, rid: int, arg: Any = None) -> Any:
        """Run ``op`` on recogniser ``rid`` in the host; re-raises what it raised.
        Raises :class:`HostLost` if the process is gone."""
        with self._lock:
            if self.lost:
                raise HostLost(f"speech host process {self.pid} is gone")
            try:
                self._conn.send((op, rid, arg))
                status, value = self._conn.recv()
            except (EOFError, OSError) as exc:
                self.lost = True
                self._process.join(0.5)
                raise HostLost(
                    f"speech host process {self.pid} exited (exit code {self._process.exitcode})"
                ) from exc
        if status == "error":
            raise value
        return value

    def stop(self) -> None:
        """Close the pipe (the host exits on it) and wait for the process."""
        with self._lock:
            self.lost = True
            self._conn.close()
        self._process.join(STOP_TIMEOUT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


class HostPool:
    """Up to ``size`` hosts; a new recogniser goes to the one with the fewest."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._hosts: list[RecognizerHost] = []
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def for_settings(cls, settings: EngineSettings) -> HostPool:
        """A pool of ``settings.speech.processes`` hosts (none started yet): the
        ``make`` of a session's shared pool (``ctx.more.shared``)."""
        return cls(settings.speech.processes)

    @property
    def threads_per_process(self) -> int:
        """The machine's cores shared out among the hosts, at least one: what a
        Whisper model decodes with when its ``threads`` is 0 (automatic)."""
        return max(1, (os.cpu_count() or 1) // self._size)

    def acquire(self) -> RecognizerHost:
        """A host for one more recogniser (started if the pool has room). Raises
        ``RuntimeError`` once the pool is closed."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the speech host pool is closed")
            self._hosts = [host for host in self._hosts if not host.lost]
            if len(self._hosts) < self._size:
                host = RecognizerHost()
                self._hosts.append(host)
                log.debug("speech host process %s started", host.pid)
            else:
                host = min(self._hosts, key=lambda h: h.users)
            host.users += 1
            return host

    def release(self, host: RecognizerHost) -> None:
        with self._lock:
            host.users -= 1
            idle = host.users <= 0
            if idle and host in self._hosts:
                self._hosts.remove(host)
        if idle:
            host.stop()

    def pids(self) -> list[int]:
        with self._lock:
            return [host.pid for host in self._hosts if host.pid is not None and not host.lost]

    def close(self) -> None:
        """Stop every host, recognisers in it or not (blocks up to
        :data:`STOP_TIMEOUT_S` per host). Idempotent."""
        with self._lock:
            self._closed = True
            hosts, self._hosts = self._hosts, []
        for host in hosts:
            host.stop()


_ids = itertools.count(1)


class HostedRecognizer:
    """A :class:`Recognizer` living in a host process (module doc). Blocks like one."""

    def __init__(self, recipe: RecognizerRecipe, pool: HostPool) -> None:
        """Build the recogniser in a host of ``pool`` (blocks while it loads its
        model). Raises what building raised there (:class:`RecognizerError`), or
        :class:`HostLost`."""
        self._recipe = recipe
        self._pool = pool
        self._id = next(_ids)
        self._host: RecognizerHost | None = None
        self._open()

    @property
    def host_pid(self) -> int | None:
        return None if self._host is None else self._host.pid

    def feed(self, pcm16k: bytes) -> list[Result]:
        results: list[Result] = self._call("feed", pcm16k)
        return results

    def flush(self) -> list[Result]:
        results: list[Result] = self._call("flush")
        return results

    def reset(self) -> None:
        if self._host is None or self._host.lost:
            self._reopen()  # the recogniser went with its host: a fresh one is a reset
            return
        self._call("reset")

    def close(self) -> None:
        """Drop the recogniser; its host stops once it holds none."""
        host, self._host = self._host, None
        if host is None:
            return
        with contextlib.suppress(HostLost):  # a dead host took the recogniser along
            host.call("close", self._id)
        self._pool.release(host)

    def _open(self) -> None:
        host = self._pool.acquire()
        try:
            host.call("build", self._id, self._recipe)
        except BaseException:
            self._pool.release(host)
            raise
        self._host = host

    def _reopen(self) -> None:
        self.close()
        self._open()

    def _call(self, op: str, arg: Any = None) -> Any:
        if self._host is None:
            self._open()
        assert self._host is not None
        try:
            return self._host.call(op, self._id, arg)
        except HostLost:
            log.warning("speech host process %s died: rebuilding its recogniser", self.host_pid)
            self._reopen()
            raise
