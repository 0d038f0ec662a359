"""Judging a soak's samples: is anything growing? Pure functions of the samples.

The run is cut in four quarters by time. Its start is the warm-up (``Bounds.warmup``,
the first quarter unless told: decoders loaded, caches and SQLite pages filled, the
first clips and sweeps): nothing there is judged except as the reference for
descriptors and threads. On the rest:

* **a trend**: the series' slope, times the run's length, is the growth the run
  would show if it went on like its last three quarters; it must stay under the
  bound. The slope is the median of the slopes between every pair of samples
  (Theil-Sen): a steady growth moves it fully, a few spikes hardly at all. A least-
  squares line was thrown by transients: two x264 encoders changing segments
  together (+4 threads each) sampled late in a CI run made a flat thread count
  "trend" by 8.2;
* **a step**: the last quarter's median minus the second quarter's must stay
  under the same bound (a slope can hide a late step; a median ignores spikes);
* descriptors and threads: the highest count after the warm-up may exceed the
  highest during it by a small constant, and neither may trend;
* the disk cap holds: the artifact files never exceed ``ARTIFACT_MAX_BYTES``
  plus a margin (the watcher checks the store every second, so up to a second's
  writes and the clip being muxed can be over), and what is not an artifact (the
  SQLite files and WALs) does not trend;
* and the run was alive: items were acknowledged in the last quarter and the
  speech nodes produced transcripts (a stalled flow grows nothing).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench._lib.sample import Sample

MIB = 1024 * 1024


@dataclass(frozen=True)
class Bounds:
    """What a run may show without being called a leak (bytes and counts)."""

    rss: int  # RSS growth over the run (trend and step)
    fds: int  # descriptors above the warm-up's highest
    threads: int  # threads above the warm-up's highest
    cap: int  # ARTIFACT_MAX_BYTES
    cap_margin: int  # the artifact files may be this much over the cap
    other: int  # databases + WALs: growth over the run (trend and step)
    backlog: int  # unacked items: growth over the run (trend and step)
    warmup: float = 0.25  # fraction of the run not judged
    need_cap: bool = False  # the run must fill the store to the cap (eviction exercised)


@dataclass(frozen=True)
class Check:
    """One line of the verdict: what was measured against what it may be."""

    name: str
    value: float
    bound: float
    ok: bool
    unit: str = ""

    def line(self) -> str:
        def show(x: float) -> str:
            return f"{x / MIB:.1f} MiB" if self.unit == "B" else f"{x:g}{self.unit}"

        mark = "PASS" if self.ok else "MISS"
        return f"{mark}  {self.name}: {show(self.value)} (bound {show(self.bound)})"


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Theil-Sen slope of ``(x, y)`` points: the median of the slopes between every
    pair with distinct x (0 if there is none)."""
    slopes = [
        (y2 - y1) / (x2 - x1)
        for (x1, y1), (x2, y2) in itertools.combinations(points, 2)
        if x2 != x1
    ]
    return statistics.median(slopes) if slopes else 0.0


def quarter(samples: Sequence[Sample], index: int) -> list[Sample]:
    """The samples in quarter ``index`` (0-3) of the run, by time."""
    end = samples[-1].t
    low, high = end * index / 4, end * (index + 1) / 4
    return [s for s in samples if low <= s.t < high or (index == 3 and s.t == end)]


def growth_checks(
    name: str,
    samples: Sequence[Sample],
    value: Callable[[Sample], float],
    bound: float,
    unit: str,
    warmup: float,
) -> list[Check]:
    """The trend (slope after the warm-up times the run's length) and the step (last
    quarter's median minus the second's), each against ``bound``."""
    span = samples[-1].t
    judged = [s for s in samples if s.t >= span * warmup]
    trend = slope([(s.t, value(s)) for s in judged]) * span
    q2 = [value(s) for s in quarter(samples, 1)]
    q4 = [value(s) for s in quarter(samples, 3)]
    step = statistics.median(q4) - statistics.median(q2) if q2 and q4 else 0.0
    return [
        Check(f"{name} trend over the run", round(trend, 1), bound, trend < bound, unit),
        Check(f"{name} last quarter - second (medians)", step, bound, step < bound, unit),
    ]


def count_checks(
    name: str, samples: Sequence[Sample], value: Callable[[Sample], int], slack: int, warmup: float
) -> list[Check]:
    """A count (descriptors, threads): the highest after the warm-up is at most the
    highest during it plus ``slack``, and it neither trends nor steps by more."""
    span = samples[-1].t
    warm = [value(s) for s in samples if s.t < span * warmup] or [value(samples[0])]
    after = [value(s) for s in samples if s.t >= span * warmup] or [value(samples[-1])]
    rise = max(after) - max(warm)
    return [
        Check(f"{name}: highest after warm-up - highest during", rise, slack, rise <= slack),
        *growth_checks(name, samples, lambda s: float(value(s)), slack + 0.5, "", warmup),
    ]


def judge(samples: Sequence[Sample], bounds: Bounds) -> list[Check]:
    """Every check of the module docstring; the run passes if all are ``ok``."""
    if len(samples) < 8:
        return [Check("samples taken (at least 8)", len(samples), 8, False)]
    warmup = bounds.warmup
    checks = [
        *growth_checks("RSS", samples, lambda s: float(s.rss), bounds.rss, "B", warmup),
        *count_checks("open descriptors", samples, lambda s: s.fds, bounds.fds, warmup),
        *count_checks("threads", samples, lambda s: s.threads, bounds.threads, warmup),
    ]
    peak = max(s.artifacts for s in samples)
    limit = bounds.cap + bounds.cap_margin
    checks.append(Check("artifact files at their peak (cap held)", peak, limit, peak <= limit, "B"))
    if bounds.need_cap:
        evicted = max((s.evicted or 0) for s in samples)
        checks.append(Check("artifacts evicted (the cap was reached)", evicted, 1, evicted >= 1))
    checks += growth_checks(
        "databases + WALs", samples, lambda s: float(s.other), bounds.other, "B", warmup
    )
    scraped = [s for s in samples if s.backlog is not None]  # a scrape may time out
    if len(scraped) >= len(samples) // 2:
        checks += growth_checks(
            "queue backlog", scraped, lambda s: float(s.backlog or 0), bounds.backlog, "", warmup
        )
    else:
        half = len(samples) // 2
        checks.append(Check("samples with the backlog scraped", len(scraped), half, False))
    last = quarter(samples, 3)
    progress = (last[-1].acked or 0) - (last[0].acked or 0) if last else 0
    checks.append(Check("items acked in the last quarter", progress, 1, progress >= 1))
    heard = samples[-1].transcripts or 0
    checks.append(Check("transcripts", heard, 1, heard >= 1))
    return checks


def passed(checks: Sequence[Check]) -> bool:
    return all(check.ok for check in checks)


def table(samples: Sequence[Sample]) -> str:
    """The samples, one row each, for people."""
    head = (
        f"{'t (s)':>6} {'RSS MiB':>8} {'fds':>4} {'thr':>4} {'CPU %':>6} {'artif MB':>9} "
        f"{'dbs MB':>7} {'backlog':>7} {'acked':>8} {'transcr':>7} {'evicted':>7}"
    )
    rows = [head]
    previous: Sample | None = None
    for s in samples:
        cpu = (
            100 * (s.cpu_s - previous.cpu_s) / (s.t - previous.t)
            if previous is not None and s.t > previous.t
            else float("nan")
        )
        rows.append(
            f"{s.t:6.0f} {s.rss / MIB:8.1f} {s.fds:4d} {s.threads:4d} {cpu:6.0f} "
            f"{s.artifacts / 1e6:9.1f} {s.other / 1e6:7.2f} {_n(s.backlog):>7} "
            f"{_n(s.acked):>8} {_n(s.transcripts):>7} {_n(s.evicted):>7}"
        )
        previous = s
    return "\n".join(rows)


def _n(value: int | None) -> str:
    return "—" if value is None else str(value)
