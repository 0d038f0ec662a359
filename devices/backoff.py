"""Reconnect delays for a lost device: capped exponential backoff, optional jitter.

Pure: the random source is injected, so a test (or a reproducible run) can fix it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator


def backoff_delays(
    base: float = 0.5,
    cap: float = 10.0,
    *,
    factor: float = 2.0,
    jitter: float = 0.0,
    rng: random.Random | None = None,
) -> Iterator[float]:
    """Yield delays in seconds: ``base, base*factor, base*factor**2, ...`` capped at ``cap``.

    Infinite; the caller stops iterating once the device is back (and starts a fresh
    generator for the next loss). ``jitter`` in ``[0, 1]`` spreads each delay down by up
    to that fraction ("equal jitter" when 0.5), so many clients do not reconnect in step;
    with ``jitter=0`` the sequence is deterministic. Never blocks.

    Raises ``ValueError`` for a non-positive ``base``, ``cap < base``, ``factor < 1`` or
    ``jitter`` outside ``[0, 1]``.
    """
    if base <= 0:
        raise ValueError(f"base must be > 0, got {base}")
    if cap < base:
        raise ValueError(f"cap ({cap}) must be >= base ({base})")
    if factor < 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be within [0, 1], got {jitter}")
    source = rng if rng is not None else random.Random()
    delay = base
    while True:
        if jitter:
            yield delay * (1.0 - jitter * source.random())
        else:
            yield delay
        delay = min(cap, delay * factor)
