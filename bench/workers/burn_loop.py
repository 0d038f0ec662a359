"""The burn loop of :mod:`bench.workers`, alone: the bare-Python ceiling runs this
module (``python -m bench.workers.burn_loop FIRST STEP N ITERATIONS AT``) and imports
nothing of mediaflow."""

from __future__ import annotations

import json
import sys
import time


def burn(iterations: int, seed: int) -> int:
    """Pure-Python CPU work, no allocation, no system call: a linear congruential
    generator stepped ``iterations`` times. Holds the GIL throughout."""
    x = seed
    for i in range(iterations):
        x = (x * 1103515245 + 12345 + i) & 0x7FFFFFFF
    return x


def main(argv: list[str]) -> None:
    """Burn items FIRST, FIRST + STEP, ... below N, starting at ``time.monotonic()``
    AT (so processes started one after another begin together); print the
    start and end as JSON."""
    first, step, n, iterations = (int(a) for a in argv[:4])
    at = float(argv[4])
    while (delay := at - time.monotonic()) > 0:
        time.sleep(delay)
    start = time.monotonic()
    for seq in range(first, n, step):
        burn(iterations, seq)
    print(json.dumps({"start": start, "end": time.monotonic()}))


if __name__ == "__main__":
    main(sys.argv[1:])
