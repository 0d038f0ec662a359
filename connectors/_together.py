"""Running a connector's coroutines together (capture loop, emitters, two media)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


async def run_together(*coros: Coroutine[Any, Any, None]) -> None:
    """Run ``coros`` concurrently until all return. Cancellable.

    When one raises, the others are cancelled and its exception is raised as itself
    (an ``ExceptionGroup`` is raised only when several failed at once), so the engine
    reports a node failure with the device's own message.
    """
    try:
        async with asyncio.TaskGroup() as group:
            for coro in coros:
                group.create_task(coro)
    except BaseExceptionGroup as failed:
        if len(failed.exceptions) == 1:
            raise failed.exceptions[0] from None
        raise
