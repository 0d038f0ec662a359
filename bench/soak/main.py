"""Soak: the demo's pieces at demo scale for ten minutes; does anything grow?

Run from the repository root::

    python -m bench.soak                     # 600 s, the table and the verdict
    python -m bench.soak --seconds 120 --json

Two virtual cameras (lavfi test pictures at 640x360, 15 frames/s: JPEGs at 5/s
and 2 s H.264 segments), eight microphones each replaying the demo's spoken
commands in a loop at speaking pace (chunk lengths picked by ``--seed`` from 20,
50, 100 and 200 ms), a ``speech`` node with the demo's grammar on each, and a
``recorder`` per camera (4 s clips, one microphone muxed in): the flow is written
by :mod:`bench.soak.flow` and run as ``mediaflow run FLOW --data DIR --port 0``
with ``ARTIFACT_MAX_BYTES=--cap`` and a sweep every ``--gc-interval`` seconds
(``ARTIFACT_GC_GRACE_S=--gc-grace``). The store grows ~0.11 MB/s until the cap
(kept clips, JPEGs and segments within the grace; the looping speech is stored
once, its chunks repeat byte for byte), so the default cap, 32 MiB, binds from
about the run's fifth minute on; 64 MiB is reached only at its very end.

Every ``--every`` seconds the process is sampled from outside
(:mod:`bench._lib.sample`): RSS, open descriptors, threads, CPU time, the data
directory's bytes (artifact files; the rest: databases and WALs) and one scrape of
``/metrics`` (backlog, items acked, transcripts, evictions). The verdict
(:mod:`bench.soak.judge`) fits a line to each series after the warm-up (the
first quarter; the line's slope is the median of pairwise slopes, so a transient
spike does not read as growth) and compares the growth it predicts over the run with
a bound, and compares the last quarter's median with the second's. Bounds: RSS
``--rss-bound`` (16 MiB); descriptors and threads at most 6 above the warm-up's
highest; the artifact files at most the cap plus ``--cap-margin``, and evictions
seen (a run that never reaches the cap has not shown it holds); databases and
WALs 8 MiB; backlog 200 items (a consumer that cannot keep up on a loaded machine
shows here, not as a leak). The run must also be alive: items acked in its last
quarter and transcripts heard. Exit status 0 when every check passes.

Progress goes to stderr, the table and verdict (or ``--json``) to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from bench._lib.flow_process import GcEnv
from bench._lib.sample import Sample
from bench.soak.flow import SoakFlow
from bench.soak.judge import MIB, Bounds, judge, passed, table
from bench.soak.run import SoakResult, run_soak
from mediaflow.gc import format_bytes, parse_bytes


def bench_bounds(args: argparse.Namespace) -> Bounds:
    return Bounds(
        rss=parse_bytes(args.rss_bound),
        fds=6,
        threads=6,
        cap=parse_bytes(args.cap),
        cap_margin=parse_bytes(args.cap_margin),
        other=8 * MIB,
        backlog=200,
        need_cap=True,
    )


def say(sample: Sample) -> None:
    print(
        f"t={sample.t:5.0f}s rss {sample.rss / MIB:6.1f} MiB fds {sample.fds} "
        f"artifacts {format_bytes(sample.artifacts)} backlog {sample.backlog}",
        file=sys.stderr,
        flush=True,
    )


def report(result: SoakResult, bounds: Bounds) -> str:
    checks = judge(result.samples, bounds)
    flow, gc = result.flow, result.gc
    lines = [
        f"soak: {flow.cameras} cameras ({flow.size} at {flow.rate}/s), {flow.microphones} "
        f"microphones with speech, {flow.cameras} recorders; seed {flow.seed}",
        f"ARTIFACT_MAX_BYTES={gc.max_bytes} ({format_bytes(gc.max_bytes)}), sweep every "
        f"{gc.interval_s:g} s, grace {gc.grace_s:g} s; {result.seconds:.0f} s asked, "
        f"{result.samples[-1].t if result.samples else 0:.0f} s sampled",
        "load average (1, 5, 15 min) at start "
        + " / at end ".join(", ".join(f"{x:.2f}" for x in load) for load in result.loadavg),
        f"exit code {result.exit_code}; {len(result.errors)} ERROR lines in the log "
        f"({result.workdir}/mediaflow.log)",
        *(f"  {line}" for line in result.errors[:10]),
        "",
        table(result.samples),
        "",
        *(check.line() for check in checks),
        f"verdict: {'no growth' if passed(checks) else 'GROWTH or a stalled run'}",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=600.0, help="how long the flow runs")
    p.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--seed", type=int, default=1, help="picks chunk lengths and pictures")
    p.add_argument("--cap", default="32MiB", help="ARTIFACT_MAX_BYTES")
    p.add_argument("--cap-margin", default="8MiB", help="how far over the cap may be seen")
    p.add_argument("--gc-interval", type=float, default=10.0, help="ARTIFACT_GC_INTERVAL_S")
    p.add_argument("--gc-grace", type=float, default=30.0, help="ARTIFACT_GC_GRACE_S")
    p.add_argument("--rss-bound", default="16MiB", help="RSS growth allowed over the run")
    p.add_argument("--dir", type=Path, help="work directory (default: a fresh temp one)")
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of the table")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bounds = bench_bounds(args)
    gc = GcEnv(bounds.cap, interval_s=args.gc_interval, grace_s=args.gc_grace)
    result = run_soak(
        args.seconds,
        flow=SoakFlow(seed=args.seed),
        gc=gc,
        every=args.every,
        workdir=args.dir,
        progress=say,
    )
    checks = judge(result.samples, bounds)
    ok = passed(checks) and result.exit_code == 0
    if args.json:
        body = result.to_json()
        body["checks"] = [asdict(check) for check in checks]
        body["ok"] = ok
        print(json.dumps(body))
    else:
        print(report(result, bounds))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
