"""``use = "timer"``: a source that fires every ``every_s`` seconds.

Each firing is ``{"n": n, "at": <epoch seconds>, "every_s": every_s}`` on port
``tick``. Firings are *guarded*: when the timer restarts (its process was
restarted, the flow reloaded with other options, or disabled and enabled),
the firings of the earlier timer still queued for a slow reader are dropped
(``stale_dropped``), not run late. ``n`` goes on across restarts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import ClassVar, Final

from mediaflow.node import Context, Node

NAP_S: Final = 0.25
"""Longest sleep between two looks at ``ctx.stopping()``."""


class TimerNode(Node):
    """Fires every ``every_s`` seconds, ``count`` times (forever without)."""

    outputs: ClassVar[Mapping[str, str]] = {"tick": "json"}
    guarded: ClassVar[frozenset[str]] = frozenset({"tick"})

    def __init__(self, every_s: float, count: int | None = None) -> None:
        if isinstance(every_s, bool) or not isinstance(every_s, int | float) or every_s <= 0:
            raise ValueError(f"every_s must be a positive number of seconds, got {every_s!r}")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise ValueError(f"count must be a whole number, got {count!r}")
        self.every_s = float(every_s)
        self.count = count

    async def run(self, ctx: Context) -> None:
        last = ctx.more.latest("tick") if ctx.redelivery else None
        n = int(last["n"]) if isinstance(last, dict) and "n" in last else 0
        loop = asyncio.get_running_loop()
        due = loop.time() + self.every_s
        while self.count is None or n < self.count:
            while (left := due - loop.time()) > 0:
                if ctx.stopping():
                    return
                await asyncio.sleep(min(left, NAP_S))
            if ctx.stopping():
                return
            n += 1
            await ctx.emit("tick", {"n": n, "at": time.time(), "every_s": self.every_s})
            # On absolute deadlines: a late firing does not push the later ones back.
            due = max(due + self.every_s, loop.time())
