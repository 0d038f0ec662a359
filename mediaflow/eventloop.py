"""The event loop the commands run on: uvloop where it is installed, else asyncio's own.

uvloop runs the same asyncio code with a libuv loop written in C; here it
lifts the HTTP server's request rate by about a fifth (``bench/serve.py``).
``MEDIAFLOW_LOOP`` picks explicitly: ``uvloop`` (refuse to start without it),
``asyncio`` (the standard loop), or ``auto`` (the default: uvloop if it
imports). Library users keep whatever loop they run mediaflow on.

:func:`run_blocking` hands a blocking step to a thread the way a cancellation
must find it: finished before whatever the cancelled caller does next.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from mediaflow.config import ConfigError, env_int

LOOP_ENV = "MEDIAFLOW_LOOP"
LOOP_CHOICES = ("auto", "uvloop", "asyncio")
IO_THREADS_ENV = "MEDIAFLOW_IO_THREADS"

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(choice: str | None = None) -> LoopFactory | None:
    """The factory for ``choice`` (default ``$MEDIAFLOW_LOOP``); None means asyncio's loop.

    Raises :class:`~mediaflow.config.ConfigError` for an unknown choice, or for
    ``uvloop`` when it is not installed.
    """
    if choice is None:
        choice = os.environ.get(LOOP_ENV, "").strip().lower() or "auto"
    if choice not in LOOP_CHOICES:
        raise ConfigError(f"{LOOP_ENV}={choice!r}: expected one of {', '.join(LOOP_CHOICES)}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(
                f"{LOOP_ENV}=uvloop but uvloop is not installed (pip install uvloop)"
            ) from None
        return None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def run(
    main: Coroutine[Any, Any, T],
    *,
    factory: LoopFactory | None = None,
    executor: ThreadPoolExecutor | None = None,
) -> T:
    """``asyncio.run(main)`` on the loop ``factory`` makes (asyncio's own when None),
    with ``executor`` (default :func:`io_executor`) as its default executor."""
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.get_loop().set_default_executor(executor or io_executor())
        return runner.run(main)


def io_executor() -> ThreadPoolExecutor:
    """The threads ``asyncio.to_thread`` runs blocking file work on: saves (each one
    fsyncs a file and its directory), reads, SQLite. ``MEDIAFLOW_IO_THREADS`` sizes
    it (default asyncio's own: cores + 4, at most 32). Each thread a busy pool adds
    keeps a malloc arena of its own (a 10-minute soak with 32 saw RSS creep as the
    pool filled), and with a camera's saves written several at once
    (:func:`connectors._emit.emit_lane`) the default kept a 720p30 camera beside 16
    speech nodes whole; a box with many cameras on a slow disk may want more."""
    workers = env_int(IO_THREADS_ENV, min(32, (os.cpu_count() or 1) + 4), minimum=1)
    return ThreadPoolExecutor(workers, thread_name_prefix="mediaflow-io")


def run_command(make_main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run a command's coroutine on the configured loop; exit code 2 for a bad ``MEDIAFLOW_LOOP``.

    Takes a factory, not a coroutine, so nothing is left un-awaited when the
    setting is refused.
    """
    try:
        factory = loop_factory()
        executor = io_executor()
    except ConfigError as exc:
        print(f"mediaflow: {exc}", file=sys.stderr)
        return 2
    return run(make_main(), factory=factory, executor=executor)


async def run_blocking(
    fn: Callable[..., T], /, *args: Any, stop: threading.Event | None = None
) -> T:
    """``fn(*args)`` in a worker thread, like :func:`asyncio.to_thread`, except when the
    caller is cancelled meanwhile: then ``stop`` is set (a step that checks it gives up
    early) and the thread is waited for before the cancellation goes on. What a
    cancelled caller does next (close the database the step is using) must not run
    beside it: CPython's ``sqlite3`` can crash the process when one thread closes a
    connection another thread is using."""
    job = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        if stop is not None:
            stop.set()
        await asyncio.wait([job])
        if not job.cancelled():
            job.exception()  # retrieved: the caller hears the cancellation
        raise
