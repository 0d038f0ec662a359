"""The source the bench's flows run: motion-like events, numbered, fast or paced.

Each value is ``{"type": "motion", "phase", "n", "score", "at"}`` (about 80 bytes of
JSON, what a motion node says): :func:`event` builds it, so the bare clients send
the same values. ``n`` counts from 0; the outage checks read it back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from mediaflow import Context, Node


def event(n: int) -> dict[str, Any]:
    """The ``n``-th value the source emits."""
    return {
        "type": "motion",
        "phase": "start" if n % 2 == 0 else "end",
        "n": n,
        "score": 0.42,
        "at": 1767225600.0 + n / 10,
    }


class Events(Node):
    """Emits ``count`` events on ``event``: as fast as ``emit`` returns when ``rate`` is
    0, else ``rate`` a second on absolute deadlines (a camera's motion does not wait
    for the sink), then ends."""

    outputs: ClassVar[Mapping[str, str]] = {"event": "json"}

    def __init__(self, count: int = 1000, rate: float = 0.0) -> None:
        self.count = count
        self.rate = rate

    async def run(self, ctx: Context) -> None:
        if ctx.more.latest("event") is not None:
            return  # a restarted run: what it emitted is in the queue already
        started = time.monotonic()
        for n in range(self.count):
            if self.rate > 0:
                await asyncio.sleep(max(0.0, started + n / self.rate - time.monotonic()))
            await ctx.emit("event", event(n))
