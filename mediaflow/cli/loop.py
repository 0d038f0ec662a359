"""The event loop and the I/O threads a command runs on, as the environment says.

``MEDIAFLOW_LOOP`` (which loop: :func:`mediaflow.eventloop.loop_factory`) and
``MEDIAFLOW_IO_THREADS`` (how many threads do blocking file work:
:func:`mediaflow.eventloop.io_executor`) are read here, at the command's
boundary, before its coroutine exists.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mediaflow import eventloop
from mediaflow.config import ConfigError, env_int

IO_THREADS_ENV = "MEDIAFLOW_IO_THREADS"


def loop_factory() -> eventloop.LoopFactory | None:
    """The factory ``MEDIAFLOW_LOOP`` picks (``auto`` when unset); None means
    asyncio's loop. Raises :class:`~mediaflow.config.ConfigError` naming the variable."""
    choice = os.environ.get(eventloop.LOOP_ENV, "").strip().lower() or "auto"
    return eventloop.loop_factory(choice)


def io_executor() -> ThreadPoolExecutor:
    """The pool ``MEDIAFLOW_IO_THREADS`` sizes (asyncio's default size without it).
    Raises :class:`~mediaflow.config.ConfigError` naming the variable."""
    workers = env_int(IO_THREADS_ENV, eventloop.default_io_threads(), minimum=1)
    return eventloop.io_executor(workers)


def run_command(make_main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run a command's coroutine on the configured loop; exit code 2 for a bad
    ``MEDIAFLOW_LOOP`` or ``MEDIAFLOW_IO_THREADS``.

    Takes a factory, not a coroutine, so nothing is left un-awaited when the
    setting is refused.
    """
    try:
        factory = loop_factory()
        executor = io_executor()
    except ConfigError as exc:
        print(f"mediaflow: {exc}", file=sys.stderr)
        return 2
    return eventloop.run(make_main(), factory=factory, executor=executor)
