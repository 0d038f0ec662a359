"""The event loop a bench runs mediaflow and its in-process peers on: the one the
commands use, as ``MEDIAFLOW_LOOP`` picks it (docs/operating.md): ``uvloop``
(refuse to run without it), ``asyncio``, or ``auto`` (the default: uvloop where it
imports). A library user chooses the loop mediaflow runs on; the bench chooses the
commands' loop so that what it measures is what ``mediaflow run`` runs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

LOOP_ENV = "MEDIAFLOW_LOOP"
# Threads for blocking file work, as the commands size them (docs/operating.md).
IO_THREADS_ENV = "MEDIAFLOW_IO_THREADS"

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory() -> LoopFactory | None:
    """uvloop's loop factory, or None for asyncio's own loop.

    Raises ValueError for a ``MEDIAFLOW_LOOP`` the commands would refuse, or for
    ``uvloop`` when it is not installed.
    """
    choice = os.environ.get(LOOP_ENV, "").strip().lower() or "auto"
    if choice not in ("auto", "uvloop", "asyncio"):
        raise ValueError(f"{LOOP_ENV}={choice!r}: expected auto, uvloop or asyncio")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ValueError(f"{LOOP_ENV}=uvloop but uvloop is not installed") from None
        return None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on :func:`loop_factory`'s loop, with as many
    threads for ``asyncio.to_thread`` as the commands give it, named as theirs
    (``mediaflow-io``) so that a bench that splits CPU by thread finds them."""
    from concurrent.futures import ThreadPoolExecutor

    threads = os.environ.get(IO_THREADS_ENV, "").strip()
    workers = int(threads) if threads else min(32, (os.cpu_count() or 1) + 4)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="mediaflow-io")
        runner.get_loop().set_default_executor(pool)
        return runner.run(main)


def loop_name() -> str:
    """``asyncio`` or the module of the loop :func:`loop_factory` makes (``uvloop``)."""
    factory = loop_factory()
    return "asyncio" if factory is None else factory.__module__
