"""Chaos: a long stream from real file sources, the engine SIGKILLed N times while they
capture, on SQLite and on Redis; nothing may be lost, repeated unmarked, or unplayable.

Run from the repository root::

    python -m bench.chaos                               # 10,000 x 100 ms: ~17 min a backend
    python -m bench.chaos --chunks 10000 --chunk-ms 20  # the same count in ~3.5 min
    python -m bench.chaos --backends redis --kills 30 --seed 7 --repeat 3 --json

The flow (see :mod:`bench.chaos.run`): a file microphone (``connector =
"microphone"``, ``device = "file:…wav"``) and a file camera (``connector = "camera"``,
``device = "file:…mp4"``), both paced in real time (the connectors have no faster
pacing: ``--chunk-ms`` is the way to more chunks per minute), feed a consumer slower
than the microphone (``--consumer-factor`` chunk lengths per chunk) that logs the PCM
of every delivery, and the recorder (clips of ``--clip-s``). ``mediaflow run FLOW
--until-idle --jsonl --data DIR`` runs it; on Redis a ``mediaflow worker`` shares the
work and the data directory, and Redis runs with ``appendonly yes``, ``appendfsync
always``. ``--kills`` times (20) a victim is SIGKILLed at a random point while the
sources capture (SQLite: the run; Redis: the run, the worker or Redis itself) and
started again at once; the schedule comes from ``--seed`` and is printed. Then:

* **chunks emitted**: the microphone's latest committed seq + 1 (the queue's latest
  value); **chunks lost**: seqs it emitted that the consumer never logged (must be 0);
* **bytes equal**: the PCM of each seq's first delivery, in seq order, equals the
  WAV's (the last chunk padded with silence); a file source resumes exactly where its
  last committed chunk ended, so no gap is allowed;
* **redelivered**: deliveries with ``deliveries > 1``; **seen twice**: seqs the
  consumer logged more than once (a kill between its log line and the ack);
  **unmarked duplicates**: a repeat without ``ctx.redelivery`` and ``deliveries > 1``,
  or a mark that disagrees with the count (must be 0); **out of order**: first
  deliveries not in seq order (must be 0);
* **clips kept / that play**: recordings the recorder kept, and how many PyAV decodes
  whole (video and audio, duration > 0).

Progress goes to stderr, the table (or ``--json``) to stdout. ``--timeout`` bounds each
run (default: three times the stream plus ten minutes); a run that overruns ends every
process it started and is reported as timed out. Exit status 1 if any run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._lib.common import Json
from bench.chaos.run import ChaosPlan, ChaosTimeout, run_chaos


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--backends", default="sqlite,redis", help="sqlite, redis or both")
    parser.add_argument("--chunks", type=int, default=10_000, help="audio chunks in the stream")
    parser.add_argument("--chunk-ms", type=int, default=100, help="audio chunk length (ms)")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs per run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill schedule")
    parser.add_argument("--repeat", type=int, default=1, help="runs per backend (seed, seed+1 …)")
    parser.add_argument("--consumer-factor", type=float, default=1.2)
    parser.add_argument("--clip-s", type=float, default=2.0, help="recorder clip length")
    parser.add_argument("--lease-ms", type=int, default=3000, help="MEDIAFLOW_LEASE_MS")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run")
    parser.add_argument("--keep", type=Path, default=None, help="keep every run's files here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not set(args.backends) <= {"sqlite", "redis"} or args.kills < 0 or args.chunks < 50:
        parser.error("--backends takes sqlite and/or redis; --kills >= 0; --chunks >= 50")
    return args


def plan_for(args: argparse.Namespace, backend: str, seed: int) -> ChaosPlan:
    seconds = args.chunks * args.chunk_ms / 1000
    return ChaosPlan(
        backend=backend,
        chunks=args.chunks,
        chunk_ms=args.chunk_ms,
        kills=args.kills,
        seed=seed,
        consumer_factor=args.consumer_factor,
        clip_s=args.clip_s,
        lease_ms=args.lease_ms,
        timeout_s=args.timeout or 3 * seconds + 600,
    )


def collect(args: argparse.Namespace) -> Json:
    root = args.keep or Path(tempfile.mkdtemp(prefix="mf-chaos-"))
    runs: list[Json] = []
    try:
        for rep in range(args.repeat):
            for backend in args.backends:
                plan = plan_for(args, backend, args.seed + rep)
                progress(
                    f"{backend}, seed {plan.seed}: {plan.chunks} chunks of {plan.chunk_ms} ms"
                    f" ({plan.seconds:.0f} s of stream), {plan.kills} kills"
                )
                if backend == "redis" and shutil.which("redis-server") is None:
                    missing = "redis-server is not installed"
                    runs.append({"plan": asdict(plan), "error": missing, "ok": False})
                    continue
                where = root / f"{backend}-{plan.seed}"
                try:
                    result = run_chaos(plan, where, media_dir=root / "media", progress=progress)
                except (ChaosTimeout, RuntimeError) as exc:  # overran, or a start failed
                    result = {"plan": asdict(plan), "error": str(exc), "ok": False}
                runs.append(result)
                progress(f"{backend}, seed {plan.seed}: {'ok' if result['ok'] else 'FAILED'}")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return {
        "meta": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "args": {k: str(v) for k, v in vars(args).items()},
        },
        "runs": runs,
        "ok": all(r["ok"] for r in runs),
    }


# -- the table -------------------------------------------------------------------------

ROWS = (  # label, how to read it from a run
    ("chunks emitted (source's committed latest seq + 1)", lambda r: r["deliveries"]["emitted"]),
    ("chunks lost", lambda r: r["deliveries"]["lost"]),
    ("consumer bytes == WAV bytes", lambda r: r["deliveries"]["bytes_equal"]),
    ("deliveries logged", lambda r: r["deliveries"]["lines"]),
    ("redelivered (deliveries > 1, all marked)", lambda r: r["deliveries"]["redelivered"]),
    ("chunks the consumer saw twice", lambda r: r["deliveries"]["repeats"]),
    ("unmarked duplicates", lambda r: r["deliveries"]["unmarked_duplicates"]),
    ("first deliveries out of order", lambda r: r["deliveries"]["out_of_order"]),
    ("max deliveries of one chunk", lambda r: r["deliveries"]["max_deliveries"]),
    ("gaps marked (discontinuity)", lambda r: r["deliveries"]["discontinuities"]),
    ("dead letters", lambda r: r["deliveries"]["dead_letters"]),
    ("clips kept", lambda r: r["clips"]["kept"]),
    ("clips that play (PyAV decodes all)", lambda r: r["clips"]["playable"]),
    ("clips with audio", lambda r: r["clips"]["with_audio"]),
    ("seconds recorded / streamed", lambda r: f"{r['clips']['seconds']:.0f} / {r['plan']['seconds']:.0f}"),  # noqa: E501
    ("kills while capturing", lambda r: f"{sum(k['capturing'] for k in r['kills'])} / {len(r['kills'])}"),  # noqa: E501
    ("median s from a kill until the victim is back", lambda r: r["back_s_median"]),
    ("wall time (s)", lambda r: r["wall_s"]),
    ("run exit status at the end", lambda r: r["run_exit"]),
    ("verdict", lambda r: "PASS" if r["ok"] else "FAIL"),
)  # fmt: skip
SPREAD_ROWS = ("redelivered", "repeats", "max_deliveries", "wall_s", "back_s_median")


def cell(run: Json, read: object) -> str:
    try:
        value = read(run)  # type: ignore[operator]
    except (KeyError, TypeError):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return "—" if value is None else str(value)


def render(result: Json) -> str:
    runs = result["runs"]
    heads = [f"{r['plan']['backend']} seed {r['plan']['seed']}" for r in runs]
    width = max(len(label) for label, _ in ROWS)
    cols = [max(len(h), 10) for h in heads]
    titles = " | ".join(h.ljust(c) for h, c in zip(heads, cols, strict=True))
    lines = ["| " + "what".ljust(width) + " | " + titles + " |"]
    lines.append("|" + "-" * (width + 2) + "|" + "|".join("-" * (c + 2) for c in cols) + "|")
    for label, read in ROWS:
        cells = [cell(r, read).ljust(c) for r, c in zip(runs, cols, strict=True)]
        lines.append("| " + label.ljust(width) + " | " + " | ".join(cells) + " |")
    for run, head in zip(runs, heads, strict=True):
        lines.append("")
        if "error" in run:
            lines.append(f"{head}: {run['error']}")
            continue
        kills = ", ".join(f"{k['at_s']:.1f}s {k['victim']}@{k['seq']}" for k in run["kills"])
        lines.append(f"{head} kills (s since start, victim@mic seq): {kills}")
        for problem in run["log_problems"] + run["unexpected_exits"] + run["clips"]["failures"]:
            lines.append(f"  ! {problem}")
        if run["deliveries"]["lost_seqs"]:
            lines.append(f"  ! lost seqs: {run['deliveries']['lost_seqs']}")
    lines += spread_lines(runs)
    return "\n".join(lines)


def spread_lines(runs: list[Json]) -> list[str]:
    """Per backend, min / median / max of the rows that vary from seed to seed."""
    out: list[str] = []
    for backend in sorted({r["plan"]["backend"] for r in runs}):
        done = [r for r in runs if r["plan"]["backend"] == backend and "error" not in r]
        if len(done) < 2:
            continue
        out.append(f"\n{backend}, {len(done)} runs (min / median / max):")
        for key in SPREAD_ROWS:
            values = [
                v for r in done
                if (v := r["deliveries"].get(key, r.get(key))) is not None
            ]  # fmt: skip
            if values:
                out.append(f"  {key}: {min(values)} / {statistics.median(values)} / {max(values)}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = collect(args)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
