"""The event loop the commands run on: uvloop where it is installed, else asyncio's own.

uvloop runs the same asyncio code with a libuv loop written in C; here it
lifts the HTTP server's request rate by about a fifth (``bench/serve.py``).
``MEDIAFLOW_LOOP`` picks explicitly: ``uvloop`` (refuse to start without it),
``asyncio`` (the standard loop), or ``auto`` (the default: uvloop if it
imports). Library users keep whatever loop they run mediaflow on. The commands
read ``MEDIAFLOW_LOOP`` and ``MEDIAFLOW_IO_THREADS`` at their boundary
(:mod:`mediaflow.cli.loop`) and pass the choice here; this module reads no
environment variable.

:func:`run_blocking` hands a blocking step to a thread the way a cancellation
must find it: finished before whatever the cancelled caller does next.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from mediaflow.config import ConfigError

LOOP_ENV = "MEDIAFLOW_LOOP"
LOOP_CHOICES = ("auto", "uvloop", "asyncio")

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(choice: str) -> LoopFactory | None:
    """The factory for ``choice`` (one of :data:`LOOP_CHOICES`); None means asyncio's loop.

    Raises :class:`~mediaflow.config.ConfigError` naming ``MEDIAFLOW_LOOP`` for an
    unknown choice, or for ``uvloop`` when it is not installed.
    """
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


def default_io_threads() -> int:
    """asyncio's own size for its default pool: cores + 4, at most 32."""
    return min(32, (os.cpu_count() or 1) + 4)


def io_executor(workers: int | None = None) -> ThreadPoolExecutor:
    """The threads ``asyncio.to_thread`` runs blocking file work on: saves (each one
    fsyncs a file and its directory), reads, SQLite. ``workers`` sizes it (the
    commands: ``MEDIAFLOW_IO_THREADS``; None: :func:`default_io_threads`). Each
    thread a busy pool adds keeps a malloc arena of its own (a 10-minute soak with
    32 saw RSS creep as the pool filled), and with a camera's saves written several
    at once (:func:`connectors._emit.emit_lane`) the default kept a 720p30 camera
    beside 16 speech nodes whole; a box with many cameras on a slow disk may want
    more."""
    return ThreadPoolExecutor(
        workers if workers is not None else default_io_threads(), thread_name_prefix="mediaflow-io"
    )


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
