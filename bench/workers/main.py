"""One executor process against two for a CPU-bound node, on Redis, with the bare
Python loop as the ceiling, measured in the same run.

Run from the repository root (about 2-3 minutes with the defaults)::

    python -m bench.workers --queue redis://127.0.0.1:6379/0
    python -m bench.workers --queue redis://127.0.0.1:6379/0 --n 4000 --burn-ms 3 --json

The flow (a TOML file in a temporary directory, one fresh key prefix per
measurement, deleted afterwards): ``bench.workers.burn:Emitter`` emits N items
``{"seq": n}`` as fast as ``emit`` returns; ``bench.workers.burn:Burner``, an unordered
node (``ordered = False``: every executor claims its stream at once), burns
about ``--burn-ms`` of pure-Python CPU per item (the iterations are calibrated
once per bench run and are the same everywhere) and appends
``pid seq start end`` to a shared log.

Measured, rep by rep (interleaved, so drift hits all four alike):

* **bare loop**: the same burn, N times, in one plain Python process that
  imports no mediaflow (:mod:`bench.workers.burn_loop`): the ceiling for one core; and
  in two such processes, the items dealt round-robin: the machine's own
  two-core speed-up;
* **one process**: ``mediaflow run FLOW --until-idle`` alone;
* **two processes**: the same plus one ``mediaflow worker FLOW --jsonl`` (its own
  ``--data``, the same ``MEDIAFLOW_QUEUE``); two cores, two executors.

Timing is from the first item started to the last item finished, read from the
log (``time.monotonic()``, one clock for every process of the machine), so
process start-up and shutdown do not count. **Pre-filled backlog:** a
source in the same process competes for the core and an executor starting a
second later would run alone meanwhile, so neither is measured: each
executor's first item waits, without burning, until the bench creates a go file,
and the bench does so once the source has emitted all N items (they are in
Redis, or claimed into an executor's line) and every executor has reported its
first item. ``MEDIAFLOW_LEASE_MS`` is left at its default (removed from the
children's environment). Target printed: two processes ≥ 1.7x one.

Keep N well above a line (``MEDIAFLOW_NODE_BUFFER``, 256) per executor: ``mediaflow
run`` claims up to a line of its source's items at enqueue, which no other
executor can take (with N = 300 it ran 85 % of them). Two figures survive a
shared host whose CPU speed drifts between runs: ``busy``, the share of the
window each process spent burning (``2 busy(2p) / busy(1p)`` is the speed-up the
engine gave at an equal burn speed), and the burn time per item with two
processes against one (the CPU's part: the bare loop's 2 / 1 shows it too).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._lib.common import Json, best_and_median, fmt_rate, loop_name, verdict
from bench._lib.redis_tools import RedisTarget, server_info
from bench.workers.burn import calibrate
from bench.workers.run import bare_loop, flow_once

TARGET_SPEEDUP = 1.7
MEASURES = (  # key in a rep, what the table calls it
    ("bare", "bare Python loop, 1 process"),
    ("bare2", "bare Python loop, 2 processes"),
    ("one", "mediaflow run, 1 process"),
    ("two", "mediaflow run + 1 worker, 2 processes"),
)
RATIOS = (  # key, numerator, denominator, what the table calls it
    ("speedup", "two", "one", "mediaflow: 2 processes / 1"),
    ("bare_speedup", "bare2", "bare", "bare loop: 2 processes / 1 (the machine's)"),
    ("one_of_bare", "one", "bare", "mediaflow / bare loop, 1 process"),
    ("two_of_bare2", "two", "bare2", "mediaflow / bare loop, 2 processes"),
)


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def collect(args: argparse.Namespace, target: RedisTarget) -> Json:
    """``--reps`` rounds of the four measurements, interleaved; blocks throughout."""
    iterations, per_iteration = calibrate(args.burn_ms / 1000)
    progress(f"burn: {iterations:,} iterations ≈ {iterations * per_iteration * 1000:.2f} ms")
    reps: list[Json] = []
    for rep in range(1, args.reps + 1):
        row: Json = {}
        for key, label in MEASURES:
            progress(f"rep {rep}: {label} ...")
            if key.startswith("bare"):
                row[key] = bare_loop(args.n, iterations, processes=2 if key == "bare2" else 1)
            else:
                executors = 2 if key == "two" else 1
                row[key] = flow_once(target, args.n, iterations, executors, args.timeout)
            state = row[key].get("error") or f"{fmt_rate(row[key].get('rate'))} items/s"
            progress(f"rep {rep}: {label}: {state}")
        reps.append(row)
    return {
        "meta": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loop": loop_name(),
            "redis": server_info(target),
            "url": target.url,
            "n": args.n,
            "reps": args.reps,
            "iterations": iterations,
            "burn_ms_calibrated": iterations * per_iteration * 1000,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "reps": reps,
    }


# -- summarising -------------------------------------------------------------------------------


def spread(values: list[float]) -> Json:
    """Median, min, max and (max - min) / median."""
    if not values:
        return {"values": [], "median": None, "min": None, "max": None, "spread": None}
    best, median = best_and_median(values)
    low = min(values)
    return {
        "values": values,
        "median": median,
        "min": low,
        "max": best,
        "spread": (best - low) / median,
    }


def complete(m: Json) -> bool:
    return bool(m.get("rate")) and "error" not in m


def summarise(raw: Json) -> Json:
    reps = raw["reps"]
    out: Json = dict(raw)
    for key, _label in MEASURES:
        out[key] = spread([r[key]["rate"] for r in reps if complete(r[key])])
    for key, top, bottom, _label in RATIOS:
        out[key] = spread(
            [
                r[top]["rate"] / r[bottom]["rate"]
                for r in reps
                if complete(r[top]) and complete(r[bottom])
            ]
        )
    # Robust to the CPU's speed changing between runs (a shared host): what the engine
    # made of the cores (the share of the window each process spent burning), and
    # how much slower one item burned when both cores were busy.
    both = [r for r in reps if complete(r["one"]) and complete(r["two"])]
    out["busy_speedup"] = spread([2 * r["two"]["busy"] / r["one"]["busy"] for r in both])
    out["burn_slowdown"] = spread([r["two"]["burn_ms"] / r["one"]["burn_ms"] for r in both])
    value = out["speedup"]["median"]
    out["target"] = {
        "name": "mediaflow: 2 processes / 1 (median)",
        "target": f"≥ {TARGET_SPEEDUP}x",
        "value": value,
        "ok": None if value is None else value >= TARGET_SPEEDUP,
    }
    out["problems"] = problems(reps)
    return out


def problems(reps: list[Json]) -> list[str]:
    found = []
    for index, r in enumerate(reps, 1):
        for key in ("one", "two"):
            m = r[key]
            label = f"rep {index}, {m.get('executors')} executor(s)"
            if m.get("error"):
                found.append(f"{label}: {m['error']}")
            if m.get("missing") or m.get("repeated"):
                found.append(f"{label}: {m['missing']} missing, {m['repeated']} run twice")
            bad_exit = {k: v for k, v in (m.get("exit") or {}).items() if v != 0}
            if bad_exit:
                found.append(f"{label}: exit status {bad_exit}")
            for name, lines in (m.get("stderr") or {}).items():
                found.extend(f"{label}, {name}: {line}" for line in lines)
    return found


# -- the table ---------------------------------------------------------------------------------


def fmt_spread(sp: Json, fmt: str) -> str:
    if sp["median"] is None:
        return "no complete run"
    values = "  ".join(format(v, fmt) for v in sp["values"])
    return (
        f"median {format(sp['median'], fmt)}  (min {format(sp['min'], fmt)}, "
        f"max {format(sp['max'], fmt)}; spread {sp['spread']:.0%}; run by run {values})"
    )


def render(s: Json) -> str:
    m = s["meta"]
    lines = [
        f"mediaflow workers — CPU-bound unordered node on Redis ({m['url']}, Redis "
        f"{m['redis']['version']})   N={m['n']:,} items, burn {m['burn_ms_calibrated']:.2f} ms "
        f"({m['iterations']:,} iterations), {m['reps']} runs",
        f"Python {m['python']} on {m['loop']}, {m['cpus']} CPUs, {m['platform']}, "
        f"{m['started_at']}",
        "",
    ]
    rows = [("items/s", "")]
    rows += [(f"   {label}", fmt_spread(s[key], ",.0f")) for key, label in MEASURES]
    rows.append(("ratios (run by run, then their median)", ""))
    rows += [(f"   {label}", fmt_spread(s[key], ".2f")) for key, _t, _b, label in RATIOS]
    rows.append(("   mediaflow at equal burn speed: 2 busy(2p) / busy(1p)",
                 fmt_spread(s["busy_speedup"], ".2f")))  # fmt: skip
    rows.append(("   burn per item in mediaflow, 2p / 1p", fmt_spread(s["burn_slowdown"], ".2f")))
    width = max(len(r[0]) for r in rows)
    lines.extend(f"{a.ljust(width)}  {b}".rstrip() for a, b in rows)
    lines.append("")
    lines.append(
        "run by run: mediaflow's items/s (share of the items per process; mean burn "
        "per item; burning / (window x processes))"
    )
    for index, r in enumerate(s["reps"], 1):
        parts = []
        for key in ("one", "two"):
            x = r[key]
            shares = " ".join(f"{k} {v:.0%}" for k, v in (x.get("shares") or {}).items())
            extra = f"; {x['burn_ms']:.2f} ms; busy {x['busy']:.0%}" if x.get("burn_ms") else ""
            parts.append(f"{x.get('executors')}p {fmt_rate(x.get('rate'))} ({shares}{extra})")
        lines.append(f"   rep {index}: " + "   ".join(parts))
    lines.append("")
    t = s["target"]
    value = "—" if t["value"] is None else f"{t['value']:.2f}x"
    lines.append(f"target: {t['name']} {value}, target {t['target']}: {verdict(t['ok'])}")
    if s["problems"]:
        lines.append("problems:")
        lines.extend(f"   - {p}" for p in s["problems"])
    else:
        lines.append("delivery: every item run exactly once, every process exited 0")
    return "\n".join(lines)


# -- command line ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.workers",
        description="Items/s of a CPU-bound unordered node with one and two executor "
        "processes on Redis, against the bare Python loop in one and two processes.",
    )
    p.add_argument("--queue", required=True, metavar="URL", help="redis://host:port/db")
    p.add_argument("--n", type=int, default=3000, help="items per measurement")
    p.add_argument("--burn-ms", type=float, default=3.0, help="CPU per item (calibrated)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per measurement")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        target = RedisTarget.parse(args.queue)
    except ValueError as exc:
        print(f"bench.workers: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    summary = summarise(collect(args, target))
    summary["meta"]["wall_s"] = time.perf_counter() - started
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    progress(f"done in {summary['meta']['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
