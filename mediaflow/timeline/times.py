"""Wall-clock times as people write them: ISO 8601, or seconds since the epoch.

The timeline keeps ``captured_at`` seconds since the epoch; the API and the command
line take and show ISO 8601. A time without a zone is read in ``naive_zone``: UTC
for the HTTP API (a URL means the same on every machine), the local zone for the
command line (what a person at that machine means).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, tzinfo
from typing import Final

LATEST: Final = 253402300799.0  # 9999-12-31T23:59:59Z, the last time ISO 8601 can write


class TimeError(ValueError):
    """A time that is neither ISO 8601 nor a number of seconds since the epoch."""


def parse_time(raw: str, *, naive_zone: tzinfo | None = UTC) -> float:
    """Seconds since the epoch of ``raw``: ``2026-12-07T14:02:00Z``,
    ``2026-12-07 14:02:00+01:00``, ``2026-12-07T14:02`` (in ``naive_zone``; None for the
    local zone) or ``1796652120.5``. Raises :class:`TimeError` naming what it got."""
    text = raw.strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = _iso_seconds(raw, text, naive_zone)
    if not (math.isfinite(seconds) and 0 <= seconds <= LATEST):
        raise TimeError(f"time {raw!r} is outside 1970-01-01 to 9999-12-31 (UTC)")
    return seconds


def _iso_seconds(raw: str, text: str, naive_zone: tzinfo | None) -> float:
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            moment = (
                moment.astimezone() if naive_zone is None else moment.replace(tzinfo=naive_zone)
            )
        return moment.timestamp()
    except (ValueError, OverflowError, OSError):
        raise TimeError(
            f"time {raw!r} is not ISO 8601 (e.g. 2026-12-07T14:02:00Z) nor seconds since the epoch"
        ) from None


def iso(seconds: float) -> str:
    """``seconds`` since the epoch as ISO 8601 in UTC, to the millisecond."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
