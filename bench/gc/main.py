"""Reference-aware GC against age-only deletion: sweep time and peak RSS by store size.

``python -m bench.gc [--sizes 100000,1000000] [--referenced 0.1] [--runs 3]``

For each size N the parent builds one store of N small artifacts (64-200 bytes
each, real sha256 digests, straight into the fan-out layout and bulk-inserted
into ``store.sqlite3`` with the store's own schema; every artifact created and
saved 15-30 days ago, so all are past any grace). A fraction (``--referenced``,
10 %) is referenced from the queue through :class:`SqliteQueue`'s real API, the
way the engine stores them (``{"value": {"$ref": {digest, media_type, size,
meta}}}``): ready and claimed (pending) emission items, dead letters and
latest values. Building it is not timed (its time is printed).

Then, ``--runs`` times, each on a fresh ``cp -a`` copy of that store:

1. **mediaflow**: ``sweep_artifacts(data_dir, queue, settings=GcSettings(grace_s=0))``
   in a fresh child process; it must delete exactly the unreferenced ones (the
   files and rows left are counted and compared with the referenced set). Before
   it, on the same copy, a dry run (which changes nothing). Peak RSS: the
   child's ``VmHWM`` after the sweep minus its RSS just before it (the high-water
   mark is reset first through ``/proc/self/clear_refs``; ``ru_maxrss`` cannot be
   used here: after a vfork+exec it starts at the parent's peak).
2. **The peer**: what Frigate or splitmuxsink do, delete by age alone:
   ``find DIR/artifacts -type f -mmin +60 -delete`` on its own fresh copy. It
   deletes everything, the referenced 10 % included: the ratio is the cost of
   knowing what is referenced. A second figure adds the age-only ``DELETE`` of
   the rows (``created_at < now``) that a store with an index also needs.

The table gives, per N, the sweep's median and range, its CPU seconds (system
time in brackets), the dry run, the peak RSS delta, the peer's times and the
ratios, then how time and RSS grow from the smallest N to the largest (targets:
time at most linear, RSS flat), and where the sweep's time went (its steps, and
inside collect the candidate pages and the delete batches). ``--quick``
runs 1,000 and 10,000 once. ``--profile`` adds one cProfile'd sweep of the
largest N (the sweep's worker-thread calls run inline there, so the profile
sees them), listing the hotspots.

The default ``--dir`` is under ``/dev/shm`` (tmpfs): disk noise out, so the
numbers are the sweep's own CPU and system-call cost. On a real disk unlinks
and the sweep's commits cost more, for the peer's unlinks too. It must hold two
copies of the largest store (~5.5 GB and 2.1M inodes for 1M artifacts), else the
temp dir is used. The machine's drift shows in the copies' time, also printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.gc.child import child_main
from bench.gc.report import render, summarise
from bench.gc.run import bench_size, choose_base, progress
from bench.gc.store import remove_tree


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gc", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="100000,1000000", help="store sizes, comma-separated")
    p.add_argument("--referenced", type=float, default=0.1, help="fraction the queue references")
    p.add_argument("--runs", type=int, default=3, help="sweeps (and peer runs) per size")
    p.add_argument("--dir", help="where the stores go (default: /dev/shm, else the temp dir)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1,000 and 10,000, one run")
    p.add_argument("--seed", type=int, default=10)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per sweep child")
    p.add_argument("--profile", action="store_true", help="cProfile one sweep of the largest N")
    p.add_argument("--profile-out", help="where the profile's stats go")
    p.add_argument("--top", type=int, default=25, help="hotspots listed per ordering")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-args", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.runs = "1000,10000", 1
    try:
        args.sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s})
    except ValueError:
        p.error(f"--sizes: not a list of integers: {args.sizes!r}")
    if not args.sizes or min(args.sizes) < 10:
        p.error("--sizes: at least one size, each >= 10")
    if not 0 < args.referenced < 1:
        p.error("--referenced must be between 0 and 1")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args.child, json.loads(args.child_args))
    base, notes = choose_base(args.dir, args.sizes)
    notes.append(f"stores under {base}")
    notes.append(
        "the peer deletes by age alone: every artifact, the referenced ones included;"
        " ours deletes exactly the unreferenced ones and checks keeps, the queue, the runs"
    )
    started = time.perf_counter()
    try:
        results = [bench_size(n, args, base) for n in args.sizes]
    finally:
        remove_tree(base)
    summary = summarise(results)
    summary["wall_s"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(render(summary, notes))
    progress(f"done in {summary['wall_s']:.0f} s")
    ok = all(r["checks_ok"] and not r["errors"] for r in summary["rows"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
