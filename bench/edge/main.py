"""An edge box that rides out its uplink: how fast it catches up, what catching up
does to the present, and what forwarding costs.

Run from the repository root (about 14 minutes a run with the defaults)::

    python -m bench.edge                             # 3 runs, 10-minute outages
    python -m bench.edge --outage-s 60 --runs 3      # about 2 minutes a run
    python -m bench.edge --json

Each run (:mod:`bench.edge.run`) is real processes on loopback: ``redis-server``
(the shared queue), ``mediaflow serve`` (the artifact service) and the edge box,
``mediaflow run`` with ``MEDIAFLOW_FORWARD_QUEUE`` / ``MEDIAFLOW_FORWARD_STORE``,
capturing a real-time lavfi camera (``testsrc2``, ``--size``, JPEGs at ``--fps``)
and a real-time file microphone (100 ms chunks). After a live window (``--live-s``),
the service and Redis are both stopped for ``--outage-s`` and started again; the
box catches up while it goes on capturing. Measured (:mod:`bench.edge.judge`):

- the catch-up rate as a multiple of the live capture rate (target >= 5x);
- how old the camera's newest value is where the work goes (``latest`` of the
  shared queue), p50/p95 while catching up against while live, in the same run;
- the box's CPU while forwarding live against the same flow run without
  forwarding (plain ``mediaflow run``, its consumers local and doing nothing) over
  a window as long: the difference per camera;
- the box's RSS before, during and after the outage (it must not grow with it),
  its growth over the outage against the same box's over as long a window at the
  same age with the link up all along (``steady_run``);
- that every item arrived in the shared queue, once, with no gap in any ``seq``.

Runs alternate which of the peers goes first. Progress goes to stderr, the
table (or ``--json``) to stdout; exit status 0 when the target is met and every
item arrived in every run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._lib.common import run_async
from bench.edge.flow import EdgeFlow
from bench.edge.judge import Figures, figures, verdict
from bench.edge.report import notes, table
from bench.edge.run import (
    ForwardRun,
    RunConfig,
    SteadyRun,
    Window,
    forward_run,
    plain_run,
    steady_run,
)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(prog="python -m bench.edge", description=doc.split("\n")[0])
    p.add_argument("--outage-s", type=float, default=600.0, help="service and Redis stopped")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--live-s", type=float, default=30.0, help="the live window (CPU, latency)")
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument(
        "--post-s", type=float, help="capture after the outage (default: outage / 4 + 10 s)"
    )
    p.add_argument("--size", default="640x360", help="the camera's frame size")
    p.add_argument("--fps", type=int, default=5, help="the camera's JPEGs a second")
    p.add_argument("--dir", type=Path, help="work directory (default: a fresh temp one)")
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of the table")
    args = p.parse_args(argv)
    if args.runs < 1 or args.outage_s <= 0 or args.live_s <= 0:
        p.error("--runs >= 1, --outage-s > 0 and --live-s > 0, please")
    return args


async def measure(
    flow: EdgeFlow, config: RunConfig, workdir: Path, runs: int
) -> list[tuple[ForwardRun, Window, SteadyRun]]:
    """Each run: the plain flow, the forwarding box through its outage and the same
    box without one; odd runs in that order, even runs the other way round."""
    done: list[tuple[ForwardRun, Window, SteadyRun]] = []
    for index in range(1, runs + 1):
        place = workdir / f"run{index}"
        say(f"-- run {index} of {runs}")
        first = index % 2 == 1
        plain = await plain_run(flow, config, place) if first else None
        steady = await steady_run(flow, config, place) if not first else None
        forwarded = await forward_run(flow, config, place, say)
        if plain is None:
            plain = await plain_run(flow, config, place)
        if steady is None:
            steady = await steady_run(flow, config, place)
        say(f"   without forwarding: {100 * plain.cores:.1f} % of a core")
        done.append((forwarded, plain, steady))
    return done


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="mediaflow-edge-"))
    flow = EdgeFlow(size=args.size, fps=args.fps)
    config = RunConfig(
        outage_s=args.outage_s, warmup_s=args.warmup_s, live_s=args.live_s, post_s=args.post_s
    )
    say(f"work directory {workdir}; {config.capture_s:.0f} s of capture a run")
    measured = run_async(measure(flow, config, workdir, args.runs))
    runs: list[Figures] = []
    for forwarded, plain, steady in measured:
        runs.append(figures(forwarded, plain, steady) | {"errors": forwarded.errors})
    said = verdict(runs)
    if args.json:
        body: dict[str, Any] = {
            "flow": flow.__dict__,
            "config": config.__dict__,
            "verdict": said,
            "runs": runs,
            "raw": [forwarded.to_json() for forwarded, _, _ in measured],
        }
        print(json.dumps(body, indent=1))
    else:
        print(
            f"edge box through a {args.outage_s:g} s outage of the service and Redis;"
            f" camera {flow.size} at {flow.fps}/s + microphone 100 ms; {args.runs} run(s)\n"
        )
        print("\n".join(table(runs)))
        for note in notes(runs):
            print(f"- {note}")
        print(f"\ncatch-up target: {said}")
    return 0 if said.startswith("MET") else 1
