"""Scale: how many 720p30 cameras and 16 kHz speaking microphones one machine sustains.

Run from the repository root (about 15 minutes with the defaults)::

    python -m bench.scale                       # the ladder, the confirmation, the peer
    python -m bench.scale --cameras 4 --mics 16 --reps 3   # one configuration only

Each rung is a real ``mediaflow run`` (:mod:`bench.scale.run`) of N virtual cameras
(lavfi ``testsrc2`` at 1280x720, 30 frames/s, paced in real time: a JPEG of every
frame and 2 s H.264 segments), M microphones replaying the demo's speech in 100 ms
chunks into ``speech`` nodes with its grammar, and one recorder (the first camera
with the first microphone), on the embedded queue and a local store under
``ARTIFACT_MAX_BYTES``. After ``--warmup`` seconds, a ``--window`` is judged
(:mod:`bench.scale.judge`): every source at ≥ 97 % of its nominal rate, nothing
lost at capture, every consumer starting ≥ 97 % of its input with a mean emit →
start latency under 0.5 s and under a second of backlog, speech heard, no error.

The ladder: cameras 1, 2, 3, ... with ``--mics`` microphones until a rung fails,
then microphones in steps of ``--mic-step`` with that many cameras. The largest
configuration found is run until it has passed ``--reps`` times in all (a failure
falls back to the rung below it on the ladder). Then a run of it under py-spy says
where the time goes (:mod:`bench.scale.profile`), and the peer
(:mod:`bench.scale.peer`: ffmpeg per camera, pocketsphinx's live pattern for the
microphones, no pipeline) does the same work ``--reps`` times: its CPU against
mediaflow's is the ratio. Target: at least 4 cameras and 16 microphones.
Progress goes to stderr, the report (or ``--json``) to stdout; exit status 0 when
the target is met in every confirming run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from bench._lib.flow_process import GcEnv
from bench.scale.flow import ScaleFlow
from bench.scale.peer import PeerResult, run_peers
from bench.scale.run import RungResult, run_rung
from mediaflow.gc import parse_bytes

TARGET = (4, 16)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Ladder:
    """Runs rungs and remembers each, in order."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.gc = GcEnv(parse_bytes(args.cap), interval_s=10.0, grace_s=15.0)
        self.runs: list[RungResult] = []

    def run(self, flow: ScaleFlow, *, profile: bool = False) -> RungResult:
        say(f"-- {flow.label}{' (profiled)' if profile else ''}")
        result = run_rung(
            flow,
            warmup_s=self.args.warmup,
            window_s=self.args.window,
            gc=self.gc,
            workdir=self.workdir / f"run{len(self.runs) + 1:02d}",
            profile=profile,
        )
        if not profile:
            self.runs.append(result)
        say(result.summary())
        for check in result.checks:
            say(f"   {check.line()}")
        return result

    def climb(self) -> list[ScaleFlow]:
        """The ladder; the passing rungs, in the order climbed."""
        args, passed = self.args, []
        for cameras in range(args.start_cameras, args.max_cameras + 1):
            flow = ScaleFlow(cameras, args.mics)
            if not self.run(flow).ok:
                break
            passed.append(flow)
        if not passed:
            return passed
        cameras = passed[-1].cameras
        mics = args.mics + args.mic_step
        while mics <= args.max_mics and self.run(ScaleFlow(cameras, mics)).ok:
            passed.append(ScaleFlow(cameras, mics))
            mics += args.mic_step
        return passed

    def confirm(self, candidates: list[ScaleFlow]) -> tuple[ScaleFlow | None, list[RungResult]]:
        """The largest candidate that passes ``--reps`` runs in all, and its runs."""
        for flow in reversed(candidates):
            runs = [r for r in self.runs if r.flow == flow]
            while len(runs) < self.args.reps and all(r.ok for r in runs):
                runs.append(self.run(flow))
            if all(r.ok for r in runs):
                return flow, runs
        return None, []


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def report(
    ladder: Ladder,
    best: ScaleFlow | None,
    confirmed: list[RungResult],
    profiled: RungResult | None,
    peers: list[PeerResult],
) -> tuple[str, bool]:
    lines = [
        "scale: 720p30 testsrc2 cameras (JPEG at 30/s + 2 s H.264 segments), 16 kHz "
        "microphones with speech (100 ms chunks, grammar), one recorder",
        "",
    ]
    lines += ["| run | cameras | mics | sustained | cores | machine | RSS MiB | failed checks |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for index, run in enumerate(ladder.runs, 1):
        failed = "; ".join(c.line()[5:] for c in run.checks if not c.ok) or run.failure or ""
        lines.append(
            f"| {index} | {run.flow.cameras} | {run.flow.microphones} | "
            f"{'yes' if run.ok else 'no'} | {run.cores:.2f} | {run.machine_cores:.2f} | "
            f"{run.rss / 2**20:.0f} | {failed} |"
        )
    lines.append("")
    met = False
    if best is None:
        lines.append("largest sustained: none (even the first rung failed)")
    else:
        met = best.cameras >= TARGET[0] and best.microphones >= TARGET[1]
        lines.append(
            f"largest sustained in {len(confirmed)} of {len(confirmed)} runs: {best.label} "
            f"(target {TARGET[0]} cameras + {TARGET[1]} microphones: "
            f"{'MET' if met else 'MISSED'})"
        )
        ours = [run.cores for run in confirmed]
        lines.append(f"mediaflow CPU, cores: {spread(ours)}")
        theirs = [peer.cores for peer in peers]
        if theirs:
            kept = sum(peer.real_time for peer in peers)
            lines.append(
                f"peer (ffmpeg per camera + pocketsphinx live, no pipeline), cores: "
                f"{spread(theirs)}; kept real time in {kept} of {len(peers)}"
            )
            ratios = [a / b for a, b in zip(ours, theirs, strict=False) if b > 0]
            lines.append(f"mediaflow / peer CPU: {spread(ratios)}")
            for peer in peers:
                lines += [f"  peer error: {error}" for error in peer.errors]
    if profiled is not None and profiled.profile is not None:
        lines += ["", *profiled.profile.lines()]
    elif profiled is not None:
        lines += ["", f"profile: {profiled.failure or 'not taken'}"]
    return "\n".join(lines), met


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    p.add_argument("--mics", type=int, default=16, help="microphones while cameras climb")
    p.add_argument("--cameras", type=int, help="measure this many cameras only (no ladder)")
    p.add_argument("--start-cameras", type=int, default=1)
    p.add_argument("--max-cameras", type=int, default=12)
    p.add_argument("--mic-step", type=int, default=8)
    p.add_argument("--max-mics", type=int, default=64)
    p.add_argument("--reps", type=int, default=3, help="passing runs the result needs")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds before the window")
    p.add_argument("--window", type=float, default=45.0, help="seconds judged")
    p.add_argument("--cap", default="1GiB", help="ARTIFACT_MAX_BYTES of each run")
    p.add_argument("--no-profile", action="store_true", help="skip the py-spy run")
    p.add_argument("--no-peer", action="store_true", help="skip the ffmpeg/pocketsphinx peer")
    p.add_argument("--dir", type=Path, help="work directory (default: a fresh temp one)")
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of the report")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="mediaflow-scale-"))
    say(f"work directory {workdir}")
    ladder = Ladder(args, workdir)
    if args.cameras is not None:
        candidates = [ScaleFlow(args.cameras, args.mics)]
    else:
        candidates = ladder.climb()
    best, confirmed = ladder.confirm(candidates)
    profiled = peers = None
    if best is not None and not args.no_profile:
        profiled = ladder.run(best, profile=True)
    if best is not None and not args.no_peer:
        peers = []
        for rep in range(args.reps):
            say(f"-- peer {rep + 1} of {args.reps}: {best.label}")
            peers.append(run_peers(best, args.window, workdir / f"peer{rep + 1}"))
            say(f"   {peers[-1].cores:.2f} cores, real time: {peers[-1].real_time}")
    text, met = report(ladder, best, confirmed, profiled, peers or [])
    if args.json:
        body = {
            "runs": [run.to_json() for run in ladder.runs],
            "best": None if best is None else [best.cameras, best.microphones],
            "confirmed": [run.to_json() for run in confirmed],
            "profile": None if profiled is None else profiled.to_json()["profile"],
            "peers": [peer.__dict__ for peer in peers or []],
            "target_met": met,
        }
        print(json.dumps(body))
    else:
        print(text)
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
