"""Pace a file or virtual source to real time, by presentation time."""

from __future__ import annotations

import time
from collections.abc import Callable

from devices.errors import BridgeClosed


class Pacer:
    """Sleeps so that media time ``pts`` is released at ``start + pts`` (wall clock).

    The first call anchors the clock. When the consumer is slow the producer falls behind
    and ``wait_until`` returns at once until it has caught up (lossless sources never skip).
    ``sleep(timeout) -> bool`` must return True when the wait was cut short by a close
    (e.g. :meth:`devices.bridge.FrameBridge.wait_closed`); the pacer then raises
    :class:`BridgeClosed`.
    """

    def __init__(
        self,
        sleep: Callable[[float], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sleep = sleep
        self._clock = clock
        self._anchor: tuple[float, float] | None = None  # (wall, pts) of the first item

    def wait_until(self, pts: float) -> None:
        """Block until ``pts`` is due. Raises :class:`BridgeClosed` if closed meanwhile."""
        now = self._clock()
        if self._anchor is None:
            self._anchor = (now, pts)
            return
        wall0, pts0 = self._anchor
        delay = wall0 + (pts - pts0) - now
        if delay > 0 and self._sleep(delay):
            raise BridgeClosed("closed while pacing")
