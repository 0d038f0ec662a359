"""Durable emissions through mediaflow's embedded SQLite backend, against peers and
ceilings measured in the same run.

Run from the repository root (about 1-3 minutes)::

    python -m bench.emissions                 # the table
    python -m bench.emissions --json          # the same numbers as JSON on stdout
    python -m bench.emissions --profile       # also cProfile the end-to-end path once
    python -m bench.emissions --n 20000 --skip pipecat,backlog
    python -m bench.emissions --queue redis://127.0.0.1:6379/0   # the Redis backend

With ``--queue`` the throughput and latency measurements run on that Redis (a
fresh key prefix each) against raw redis-py on the same server: see
:mod:`bench.emissions.redis_queue`. Without it, everything below is on SQLite.

Pipecat is optional (``pip install -e '.[bench]'``); without it its line says
``pipecat: unavailable (<reason>)`` and the rest still runs. Progress goes to
stderr. Every measurement runs in a child process of its own, with a fresh
temporary data directory, and a watchdog that reports what was measured so far
if the measurement overruns (``--timeout``).

What each number means (machines here are noisy: read the ratios first):

1. **durable emissions/s end to end**: a two-stage flow, a source node that
   ``await ctx.emit("value", {"seq": n})`` N times as fast as ``emit`` returns
   and a consumer node that does nothing. Timed from the source's first line
   until ``FlowSession.wait(until_idle=True)`` returns, i.e. every item was
   consumed *and acked* and the queue file holds nothing for the flow
   (``wait`` polls every 50 ms, so a short run is rounded up). N items divided
   by that time; ``--reps`` runs, best and median (targets use the median).
   The consumer also checks delivery: each seq exactly once, in order.
2. **emit → consumer-start latency**: a source paced on absolute deadlines at
   ``--latency-rate`` per second for ``--latency-seconds`` puts
   ``time.perf_counter()`` in each value just before ``emit``; the consumer
   records ``time.perf_counter() - emitted_at`` as its ``run`` starts (both run in
   one process: a monotonic clock, immune to wall-clock steps). p50 / p99 / max.
3. **RSS over a backlog**: the flow is paused right after it starts, a source
   emits ``--backlog-items`` values of about ``--backlog-payload`` bytes, so
   all of them wait on disk; RSS (``/proc/self/statm``) is sampled before the
   first emit, at each quarter, and (every 100 ms) while the flow drains after
   ``resume``. Growth = highest sample - first sample.
4. **peers and ceilings** (see :mod:`bench.emissions.peers`): the same two-stage
   pipeline on Pipecat (in memory, no durability, observers off; plus, for
   reference only, frames fed through ``PipelineWorker.queue_frame``); an
   ``asyncio.Queue`` hand-off between two tasks (the in-memory ceiling); raw
   SQLite in WAL mode with ``synchronous=NORMAL``: single-INSERT transactions
   per second (the ceiling for one durable emission per transaction) and
   claim+ack per second in batches of 256.

Targets printed next to the results: ≥ 25,000 durable emissions/s end to end
and ≥ 1.4x Pipecat's rate; p99 ≤ 5 ms at 1,000 emissions/s; RSS growth over
the backlog < 32 MiB.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._lib.common import Json, emit_result, loop_name
from bench.emissions.child import child_backlog, child_latency, child_profile, child_throughput
from bench.emissions.render import render
from bench.emissions.report import MODULE as MODULE
from bench.emissions.report import Report, finite, progress, run_measure, summarise

# -- in the child: python -m bench.emissions --child NAME -------------------------------


def child_main(name: str, args: Json) -> int:
    """Run one measurement and print its result line; stdout carries nothing else."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from bench.emissions import peers

    children: dict[str, Callable[..., Json]] = {
        "throughput": child_throughput,
        "profile": child_profile,
        "latency": child_latency,
        "backlog": child_backlog,
        "pipecat": peers.measure_pipecat,
        "asyncio_queue": peers.measure_asyncio_queue,
        "sqlite": peers.measure_sqlite,
    }
    if name.startswith("redis_"):  # the --queue measurements; SQLite's children import none
        from bench.emissions import redis_peer, redis_queue

        children["redis_raw"] = redis_peer.measure_redis_raw
        children["redis_scripts"] = redis_queue.child_scripts
    try:
        result = children[name](**args)
    except Exception as exc:
        logging.getLogger("bench").exception("measurement %s failed", name)
        result = {"error": f"{type(exc).__name__}: {exc}"}
    emit_result(result)
    return 0


# -- the parent: plan, run, report ------------------------------------------------------


def collect(args: argparse.Namespace) -> Report:
    skip = set(args.skip)
    report = Report(meta=machine_meta(args))
    if "sqlite" not in skip:
        run_measure(report, "sqlite", "sqlite", {"n": args.sqlite_n, "reps": args.reps}, 120)
    # Interleave mediaflow's runs with the peers' so drift on a noisy machine
    # hits both sides of each ratio alike.
    mf_gave_up = False
    for rep in range(args.reps):
        if not mf_gave_up:
            run = run_measure(
                report,
                "throughput",
                "throughput",
                {"n": args.n, "timeout_s": args.timeout},
                args.timeout,
            )
            if run.timed_out or run.error:
                mf_gave_up = True
                if rep + 1 < args.reps:
                    report.notes.append(
                        f"mediaflow throughput: run {rep + 1} did not finish cleanly; "
                        f"the remaining {args.reps - rep - 1} run(s) were skipped"
                    )
        if "pipecat" not in skip:
            for key, shape in (("pipecat", "processors"), ("pipecat_queue_frame", "queue_frame")):
                run_measure(
                    report,
                    key,
                    "pipecat",
                    {"n": args.n, "reps": 1, "timeout_s": args.timeout, "shape": shape},
                    args.timeout + 60,
                )
        if "queue" not in skip:
            run_measure(report, "asyncio_queue", "asyncio_queue", {"n": args.n, "reps": 1}, 60)
    if "latency" not in skip:
        budget = args.latency_seconds + args.timeout
        run_measure(
            report,
            "latency",
            "latency",
            {"rate": args.latency_rate, "seconds": args.latency_seconds, "timeout_s": budget},
            budget,
        )
    if "backlog" not in skip:
        budget = args.timeout + 30
        run_measure(
            report,
            "backlog",
            "backlog",
            {"items": args.backlog_items, "payload": args.backlog_payload, "timeout_s": budget},
            budget,
        )
    if args.profile:
        profile_n = args.profile_n or min(args.n, 20_000)
        budget = args.timeout
        run_measure(
            report,
            "profile",
            "profile",
            {"n": profile_n, "timeout_s": budget, "out": args.profile_out, "top": args.top},
            budget,
        )
    return report


def machine_meta(args: argparse.Namespace) -> Json:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "loop": loop_name(),
        "n": args.n,
        "reps": args.reps,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# -- command line ----------------------------------------------------------------------------


SKIPPABLE = ("pipecat", "queue", "sqlite", "latency", "backlog")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.emissions",
        description="Durable emissions/s, latency and backlog RSS for mediaflow's SQLite "
        "backend, with Pipecat, asyncio.Queue and raw SQLite measured in the same run.",
    )
    p.add_argument("--n", type=int, default=50_000, help="emissions per throughput run")
    p.add_argument("--reps", type=int, default=3, help="throughput runs (best and median)")
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds one throughput run may take"
    )
    p.add_argument("--latency-rate", type=float, default=1000.0)
    p.add_argument("--latency-seconds", type=float, default=5.0)
    p.add_argument("--backlog-items", type=int, default=100_000)
    p.add_argument("--backlog-payload", type=int, default=1024, help="bytes of JSON per item")
    p.add_argument("--sqlite-n", type=int, default=100_000, help="rows per raw SQLite run")
    p.add_argument(
        "--skip",
        type=lambda text: [s for s in text.split(",") if s],
        default=[],
        help=f"comma-separated measurements to leave out: {', '.join(SKIPPABLE)}",
    )
    p.add_argument(
        "--queue",
        metavar="URL",
        help="measure mediaflow on this Redis (redis://host:port/db; a fresh key prefix per "
        "measurement) against raw redis-py on the same server, instead of SQLite",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--profile", action="store_true", help="cProfile one end-to-end run")
    p.add_argument("--profile-n", type=int, default=0, help="emissions profiled (min(N, 20k))")
    p.add_argument(
        "--profile-out",
        default=os.path.join(tempfile.gettempdir(), "mediaflow-emissions.prof"),
    )
    p.add_argument("--top", type=int, default=25, help="hotspots listed per ordering")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-args", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = set(args.skip) - set(SKIPPABLE)
    if unknown:
        p.error(f"--skip: unknown {', '.join(sorted(unknown))} (choose from {SKIPPABLE})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args.child, json.loads(args.child_args))
    started = time.perf_counter()
    if args.queue:
        from bench._lib.redis_tools import RedisTarget
        from bench.emissions import redis_queue

        try:
            target = RedisTarget.parse(args.queue)
        except ValueError as exc:
            print(f"bench.emissions: {exc}", file=sys.stderr)
            return 2
        redis_summary = redis_queue.summarise(redis_queue.collect(args, target))
        redis_summary["meta"]["wall_s"] = time.perf_counter() - started
        if args.json:
            print(json.dumps(finite(redis_summary), indent=2, default=str, allow_nan=False))
        else:
            print(redis_queue.render(redis_summary))
        progress(f"done in {redis_summary['meta']['wall_s']:.0f} s")
        return 0
    summary = summarise(collect(args))
    summary["meta"]["wall_s"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(finite(summary), indent=2, default=str, allow_nan=False))
    else:
        print(render(summary))
    progress(f"done in {summary['meta']['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
