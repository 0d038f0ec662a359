"""When a live source's packets were captured, from their own timestamps. Pure.

A network camera's packets reach the reader late by a varying amount (the network,
a reader that was busy), and the ones it sent while the connection was being opened
all at once, out of FFmpeg's buffer. Their timestamps are regular: :class:`CaptureClock`
places each at an anchor plus its media time, and :class:`BurstHold` keeps the packets
of that first burst until the anchor has seen its end.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")

# How far the capture clock may run behind arrival, as the least lag seen over a while,
# before it is moved forward: a camera clock slower than this machine's (ppm of drift),
# or a stream that restarted its timestamps.
MAX_CLOCK_LAG_S = 1.0
CLOCK_WINDOW = 256  # packets over which that least lag is taken
# A read that returned sooner than this came out of a buffer, not off the network:
# FFmpeg answers from memory in microseconds; a live stream makes a reader wait for
# its next packet (a few ms at least, between a 30 fps camera's packets).
BUFFERED_READ_S = 0.002
BURST_PACKETS = 2048  # a burst held longer than this (~20 s of a camera) is let go


class CaptureClock:
    """Wall-clock capture times of media times (see the module doc).

    The anchor (the wall clock of media time 0) follows the earliest deliveries: a
    packet cannot have been captured after it arrived, so one that would be pulls the
    anchor back; and when even the least lag over the last ``window`` packets exceeds
    ``max_lag_s`` (a source clock slower than this machine's), the anchor moves forward
    by that much. Times never go back per stream (``key``).
    """

    def __init__(self, max_lag_s: float = MAX_CLOCK_LAG_S, window: int = CLOCK_WINDOW) -> None:
        self.max_lag_s = max_lag_s
        self._anchor: float | None = None
        self._lags: deque[float] = deque(maxlen=window)
        self._latest: dict[str, float] = {}

    def observe(self, media_s: float, arrived_at: float) -> None:
        """Media time ``media_s`` arrived at ``arrived_at`` (wall clock)."""
        if self._anchor is None or self._anchor + media_s > arrived_at:
            self._anchor = arrived_at - media_s
            self._lags.clear()
        self._lags.append(arrived_at - (self._anchor + media_s))
        if len(self._lags) == self._lags.maxlen and min(self._lags) > self.max_lag_s:
            self._anchor += min(self._lags)
            self._lags.clear()

    def time_of(self, media_s: float, key: str = "") -> float:
        """The capture time of ``media_s`` by the anchor now, never before the last one
        given for ``key``. ``ValueError`` before anything was observed."""
        if self._anchor is None:
            raise ValueError("nothing observed yet")
        at = max(self._anchor + media_s, self._latest.get(key, float("-inf")))
        self._latest[key] = at
        return at

    def captured_at(self, media_s: float, arrived_at: float, key: str = "") -> float:
        """:meth:`observe`, then :meth:`time_of`."""
        self.observe(media_s, arrived_at)
        return self.time_of(media_s, key)


class BurstHold(Generic[T]):
    """Holds the items a live source delivers at once when it is opened (read from a
    buffer) until a read first waits for the network, then lets everything through.
    Disabled (``enabled=False``: files are not late), it holds nothing."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        buffered_read_s: float = BUFFERED_READ_S,
        most: int = BURST_PACKETS,
    ) -> None:
        self.buffered_read_s = buffered_read_s
        self.most = most
        self._settled = not enabled
        self._held: list[T] = []

    def take(self, item: T, read_s: float) -> list[T]:
        """``item``, which took ``read_s`` to read; the items to let through now."""
        if not self._settled and read_s < self.buffered_read_s and len(self._held) < self.most:
            self._held.append(item)
            return []
        self._settled = True
        out, self._held = [*self._held, item], []
        return out

    def flush(self) -> list[T]:
        """What is still held (the source ended during its burst)."""
        out, self._held = self._held, []
        return out
