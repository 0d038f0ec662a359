"""Live view: glass-to-glass latency in Chromium, A/V sync, CPU per viewer and per stream.

Run from the repository root (about 8 minutes with the defaults)::

    python -m bench.live                        # 3 runs of 20 s windows
    python -m bench.live --runs 1 --seconds 8   # a quick look
    python -m bench.live --json

Each run is a real ``mediaflow run`` (:mod:`bench.live.run`) of one camera (lavfi
``testsrc2`` 1280x720 at 30 frames/s, paced in real time, a white box flashing for
0.1 s at the start of every source second; JPEGs at 5/s, 2 s H.264 segments, the live
view in 0.5 s parts) carrying one microphone's sound (lavfi ``aevalsrc`` at 16 kHz, a
1 kHz beep for 0.1 s at the start of every second), with a recorder, as the demo has.

- **Latency**: the wall in headless Chromium plays the camera live; after
  ``--warmup`` seconds, every frame shown over ``--seconds`` gives its latency
  (display time minus capture time): p50, p95 and max per run.
- **WebRTC, same run**: the wall once more, now over WHEP (the page without
  ``?live=hls``; the video must say it plays WebRTC); each frame's capture time comes
  from the flashes and its RTP timestamp (:mod:`bench.live.webrtc`): p50, p95 and max,
  and each split into before and after the browser received it. The flow's CPU with
  ``--viewers`` WHEP viewers (aiortc receiving, not decoding: :mod:`bench.live.whep`),
  in two windows bracketed by the no-viewer ones; after the first, two peers beside
  the flow: the floor (their datagrams only sent, :mod:`bench.live.floor`) and
  GStreamer's ``webrtcbin`` sending the same camera to as many aiortc viewers
  (:mod:`bench.live.gst_peer`), each with its own CPU.
- **A/V sync**: one HLS viewer records the stream; each flash and beep found in it
  is placed on the capture clock by the parts' ``PROGRAM-DATE-TIME`` and compared
  with when the source made it (the items' ``captured_at - pts``); the A/V offset is
  the audio error minus the video error, per flash (:mod:`bench.live.sync`). Two
  independent sources share no truth beyond those capture facts, so a clip whose
  flashes and beeps are made together (ffmpeg, once per benchmark) is also replayed
  live with the file connector and its own sound: there ``beep - flash`` in the
  stream is the offset a viewer sees, against the file.
- **CPU**: the flow's processes over a window with no viewer (the camera without
  anyone watching: no sound is encoded), 1 HLS viewer (the live stream's own cost),
  ``--viewers`` HLS viewers (reading every part, as players), and the wall in
  Chromium; the viewers run in a process of their own.
- **Peer, same run**: ffmpeg ``-re`` on the same lavfi graphs into its own HLS muxer
  (0.5 s fMP4 segments), alone after the flow stopped: its CPU, and how late each
  segment appears after its end, next to mediaflow's part listing lag.

Targets printed: p95 latency ≤ 1.5 s (LL-HLS) and ≤ 300 ms (WebRTC); |A/V offset|
≤ 40 ms (both ways above); ten viewers add < 10 % CPU (HLS, and WHEP). Each counts
as met only when every run meets it with 10 % of the bound to spare, over at least 3
runs. CPU figures are noisy on a shared 2-core machine: the machine's busy cores in
each window are in the notes. Progress goes to stderr, the report (or ``--json``) to
stdout; exit status 0 when every target is met.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from bench.live.flow import LiveFlow, make_clip
from bench.live.judge import figures, judged, report
from bench.live.run import RunConfig, RunResult, run_once


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def clip_for(flow: LiveFlow, config: RunConfig, workdir: Path) -> Path | None:
    """The clip with flashes and beeps made together, or None (said why) without ffmpeg."""
    seconds = config.settle_s + config.seconds + 30.0
    try:
        return make_clip(workdir / "clip.mkv", flow, seconds)
    except (OSError, subprocess.SubprocessError) as exc:
        say(f"no clip, so no file A/V offset: {type(exc).__name__}: {exc}")
        return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(prog="python -m bench.live", description=doc.split("\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs, each with its own flow and peer")
    p.add_argument("--seconds", type=float, default=20.0, help="each measured window")
    p.add_argument(
        "--warmup",
        type=float,
        default=5.0,
        help="before the first window, and in Chromium before its window",
    )
    p.add_argument("--settle", type=float, default=3.0, help="viewers start before a window")
    p.add_argument("--viewers", type=int, default=10, help="HLS viewers in the busy window")
    p.add_argument("--no-browser", action="store_true", help="skip Chromium (no latency)")
    p.add_argument("--no-webrtc", action="store_true", help="skip WHEP (wall and viewers)")
    p.add_argument("--no-peer", action="store_true", help="skip ffmpeg's HLS muxer")
    p.add_argument("--no-clip", action="store_true", help="skip the file's own A/V offset")
    p.add_argument("--dir", type=Path, help="work directory (default: a fresh temp one)")
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of the report")
    p.add_argument("--json-file", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    if args.runs < 1 or args.seconds <= 0 or args.viewers < 2:
        p.error("--runs ≥ 1, --seconds > 0 and --viewers ≥ 2, please")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="mediaflow-live-"))
    config = RunConfig(
        warmup_s=args.warmup,
        seconds=args.seconds,
        settle_s=args.settle,
        viewers=args.viewers,
        browser=not args.no_browser,
        peer=not args.no_peer,
        webrtc=not args.no_webrtc,
    )
    flow = LiveFlow()
    say(f"work directory {workdir}")
    clip = None if args.no_clip else clip_for(flow, config, workdir)
    runs: list[RunResult] = []
    for index in range(1, args.runs + 1):
        say(f"-- run {index} of {args.runs}")
        runs.append(run_once(flow, config, workdir / f"run{index}", index, say, clip))
        for error in runs[-1].errors:
            say(f"   error: {error}")
    verdicts = judged([figures(run, args.viewers) for run in runs])
    met = all(said == "MET" for _, said in verdicts)
    body = {
        "flow": asdict(flow),
        "config": asdict(config),
        "runs": [run.to_json() | {"figures": figures(run, args.viewers)} for run in runs],
        "targets": [
            {"target": t.name, "key": t.key, "bound": t.bound, "verdict": said}
            for t, said in verdicts
        ],
        "met": met,
    }
    if args.json_file is not None:
        args.json_file.write_text(json.dumps(body))
    if args.json:
        print(json.dumps(body))
    else:
        heading = (
            f"live: camera {flow.size} at {flow.rate} frames/s (testsrc2, a flash each "
            f"second; H.264, {flow.segment_s:g} s GOP, 0.5 s parts) + microphone "
            f"{flow.audio_rate} Hz (a beep each second, AAC live); {len(runs)} run(s), "
            f"{args.seconds:g} s windows; work directory {workdir}"
        )
        print(report(runs, args.viewers, heading))
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
