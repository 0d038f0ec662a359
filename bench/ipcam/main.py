"""IP cameras: N 1080p30 H.264 + AAC RTSP streams recorded, pictured and watched live.

Run from the repository root (about 15 minutes with the defaults)::

    python -m bench.ipcam                                     # 3 runs of 1, 4, 8, 16 cameras
    python -m bench.ipcam --runs 1 --cameras 1,4 --seconds 10 # a quick look (~2.5 min)
    python -m bench.ipcam --cameras 16,20,24 --json

GStreamer's RTSP server (``tests/rtsp_server.py``, Debian's ``/usr/bin/python3``) plays
1920x1080 30 frames/s H.264 High (an IDR every second, no B-frames) with 48 kHz AAC on
``N`` mounts, camera ``k`` the same two-minute file rotated by ``k`` seconds so that no
two cameras show the same picture at once (:mod:`bench.ipcam.media`). For each ``N``
in ``--cameras``, in each of ``--runs`` runs, against a fresh server each time:

- **mediaflow** (:mod:`bench.ipcam.run`): one ``mediaflow run`` of ``N`` cameras
  (``fps = 1``, ``segment_s = --segment-s``, ``image = true``) each with a recorder
  (``clip_s = 4``); the CPU of its process tree over ``--seconds`` with no viewer, then
  over ``--live-seconds`` with every camera followed by an LL-HLS player in a process of
  its own (:mod:`bench.ipcam.hls`: per part, downloaded - capture time of its last
  frame). Then every camera's clips and segments are checked slice by slice against
  the file (:mod:`bench.ipcam.loss`).
- **the peer** (:mod:`bench.ipcam.peer`): one ffmpeg per camera, ``-c copy`` into 4 s
  segments plus ``-vf fps=1`` JPEGs (the issue's command), and the same with
  ``-skip_frame nokey`` (decoding only keyframes, as mediaflow does); their CPU over
  ``--seconds``.

The RTSP server's CPU and the machine's are measured in every window and reported: the
server shares the 2 cores. Odd runs measure mediaflow first, even runs the peers first.

A step is *sustained* (:mod:`bench.ipcam.judge`) when no packet was lost or skipped,
JPEGs came at 1/s, clips kept up, every camera played live, and mediaflow and the server
used at most 90 % of the cores. Targets printed: mediaflow's CPU per camera ≤ 1.2x the
issue's peer's, at the largest N where both kept up in every run; ≥ 16 cameras
sustained on 2 cores in every run; every video packet the server sent is in the clips.
Progress goes to stderr, the report (a markdown table) or ``--json`` to stdout; exit
status 0 when every target is met.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

from bench.ipcam.flow import IpcamFlow
from bench.ipcam.judge import Step, checks
from bench.ipcam.media import CameraMedia, camera_files
from bench.ipcam.peer import VARIANTS, run_peer
from bench.ipcam.report import report, to_json
from bench.ipcam.run import PhaseConfig, run_mediaflow

STREAM_MARGIN_S = 45.0  # opening N cameras, stopping, and slack: a mount plays once


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(prog="python -m bench.ipcam", description=doc.split("\n")[0])
    p.add_argument("--cameras", default="1,4,8,16", help="camera counts, comma-separated")
    p.add_argument("--runs", type=int, default=3, help="runs of every step, for the spread")
    p.add_argument("--seconds", type=float, default=10.0, help="each CPU window")
    p.add_argument("--live-seconds", type=float, default=8.0, help="the watched window")
    p.add_argument("--warmup", type=float, default=6.0, help="after every camera's first JPEG")
    p.add_argument("--peer-warmup", type=float, default=3.0, help="the same for ffmpeg")
    p.add_argument("--segment-s", type=float, default=4.0, help="the cameras' segment_s")
    p.add_argument("--peers", default=",".join(VARIANTS), help="peer variants, or 'none'")
    p.add_argument("--no-live", action="store_true", help="skip the watched window")
    p.add_argument("--keep", action="store_true", help="keep the recordings")
    p.add_argument(
        "--profile", action="store_true", help="one more phase at the largest N under py-spy"
    )
    p.add_argument("--dir", type=Path, help="work directory (default: a fresh temp one)")
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of the report")
    p.add_argument("--json-file", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    try:
        args.counts = sorted({int(n) for n in args.cameras.split(",") if n.strip()})
    except ValueError:
        p.error("--cameras takes whole numbers, e.g. 1,4,8,16")
    args.variants = [] if args.peers == "none" else [v for v in args.peers.split(",") if v]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or not args.counts or min(args.counts) < 1:
        p.error(f"--cameras ≥ 1; --peers among {', '.join(VARIANTS)} or 'none'")
    if args.runs < 1 or args.seconds <= 0 or args.live_seconds <= 0:
        p.error("--runs ≥ 1, --seconds > 0 and --live-seconds > 0, please")
    return args


def run_step(
    run: int,
    flow: IpcamFlow,
    files: list[Path],
    media: CameraMedia,
    config: PhaseConfig,
    args: argparse.Namespace,
    workdir: Path,
) -> Step:
    """mediaflow and each peer variant at ``flow.cameras`` cameras, in the run's order."""
    step = Step(run, flow.cameras)

    def ours() -> None:
        say(f"   mediaflow, {flow.cameras} camera(s)")
        step.mediaflow = run_mediaflow(flow, files, media, config, workdir / "mediaflow", say)
        for check in checks(flow, step.mediaflow):
            if not check.ok:
                say(f"   FAILED {check.name}: {check.detail}")

    def theirs() -> None:
        for variant in args.variants:
            say(f"   {variant}, {flow.cameras} camera(s)")
            step.peers[variant] = run_peer(
                variant,
                flow.cameras,
                files,
                media,
                warmup_s=args.peer_warmup,
                seconds=args.seconds,
                segment_s=flow.segment_s,
                fps=flow.fps,
                workdir=workdir / variant,
                say=say,
                keep=args.keep,
            )

    for phase in (ours, theirs) if run % 2 else (theirs, ours):
        phase()
    return step


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="mediaflow-ipcam-"))
    config = PhaseConfig(
        warmup_s=args.warmup,
        seconds=args.seconds,
        live_s=args.live_seconds,
        live=not args.no_live,
        keep=args.keep,
    )
    longest = max(config.phase_s, args.peer_warmup + args.seconds) + STREAM_MARGIN_S
    media = CameraMedia(seconds=max(120.0, 30.0 * math.ceil(longest / 30.0)))
    say(f"work directory {workdir}; the cameras' file: {media.label}, {media.seconds:g} s")
    files = camera_files(media, max(args.counts))
    flows = {n: IpcamFlow(n, segment_s=args.segment_s) for n in args.counts}
    steps: list[Step] = []
    started = time.monotonic()
    for run in range(1, args.runs + 1):
        for n, flow in flows.items():
            say(f"-- run {run} of {args.runs}: {n} camera(s) ({time.monotonic() - started:.0f} s)")
            place = workdir / f"run{run}" / f"n{n}"
            steps.append(run_step(run, flow, files, media, config, args, place))
    profiled = None
    if args.profile:
        n = max(flows)
        say(
            f"-- profile: mediaflow, {n} camera(s), not judged ({time.monotonic() - started:.0f} s)"
        )
        phase = replace(config, profile=True, live=False)
        profiled = run_mediaflow(flows[n], files, media, phase, workdir / "profile", say)
    body = to_json(flows, steps) | {
        "media": asdict(media),
        "config": asdict(config),
        "cores": os.cpu_count(),
        "wall_s": time.monotonic() - started,
        "profile": None if profiled is None else profiled.to_json(),
    }
    if args.json_file is not None:
        args.json_file.write_text(json.dumps(body))
    if args.json:
        print(json.dumps(body))
    else:
        heading = (
            f"ipcam: N RTSP cameras ({media.label}, 48 kHz AAC) from GStreamer's RTSP "
            f"server; mediaflow: fps = 1 JPEGs, segment_s = {args.segment_s:g}, recorder "
            f"clip_s = 4, live view; {args.runs} run(s), {args.seconds:g} s CPU windows, "
            f"{args.live_seconds:g} s watched; {os.cpu_count()} cores; "
            f"{time.monotonic() - started:.0f} s in all"
        )
        print(report(flows, steps, heading, profiled))
    return 0 if body["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
