"""Recorder cost next to the camera's: CPU seconds per clip-second.

The camera's H.264 encode of the frames (SegmentEncoder, as the ``video`` port does)
against the recorder's remux of the resulting segments into clips, without and with
an AAC track encoded from 16 kHz PCM. Runs on virtual frames, no flow, no disk store:

    python bench/record/main.py [--size 640x360] [--rate 15] [--seconds 20] [--clip 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import av
import numpy as np

from connectors._segments import SegmentEncoder, SegmentJob
from connectors._timeline import Epoch
from mediaflow.nodes.recorder_mux import ClipAudio, SegmentFile, mux_clip


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.record", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--size", default="640x360")
    parser.add_argument("--rate", type=int, default=15)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--segment", type=float, default=2.0)
    parser.add_argument("--clip", type=float, default=10.0)
    args = parser.parse_args()
    source = av.open(f"testsrc2=size={args.size}:rate={args.rate}", format="lavfi")
    frames = []
    for frame in source.decode(video=0):
        frames.append(frame)
        if len(frames) >= args.seconds * args.rate:
            break
    source.close()
    encoder = SegmentEncoder("h264", args.segment, fps=args.rate)
    epoch = Epoch(0, 0.0, None)
    started = time.process_time()
    segments = []
    for index, frame in enumerate(frames):
        pts = index / args.rate
        segments += encoder.push(SegmentJob(frame, None, pts, pts, epoch))
    segments += encoder.flush()
    encode_cpu = time.process_time() - started
    per_clip = max(1, round(args.clip / args.segment))
    rate = 16000
    tone = np.sin(2 * np.pi * 440 * np.arange(round(args.clip * rate)) / rate)
    pcm = (tone * 8000).astype("<i2").reshape(-1, 1)
    rows = [("camera H.264 encode (veryfast)", encode_cpu, args.seconds)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = []
        for index, segment in enumerate(segments):
            path = folder / f"s{index}.mp4"
            path.write_bytes(segment.data)
            files.append(SegmentFile(path, segment.pts, segment.duration))
        for label, audio in (("recorder remux, video only", None), ("recorder remux + AAC", pcm)):
            started = time.process_time()
            seconds = 0.0
            for first in range(0, len(files) - per_clip + 1, per_clip):
                group = files[first : first + per_clip]
                base = group[0].offset
                clip = [SegmentFile(f.path, f.offset - base, f.duration) for f in group]
                track = ClipAudio(audio, rate) if audio is not None else None
                mux_clip(clip, "video/mp4", track, folder / "clip.mp4")
                seconds += sum(f.duration for f in group)
            rows.append((label, time.process_time() - started, seconds))
    print(
        f"{args.size} at {args.rate} fps, segments of {args.segment:g} s, clips of {args.clip:g} s"
    )
    print(f"{'stage':34} {'CPU s':>8} {'media s':>8} {'CPU s per media s':>18}")
    for label, cpu, seconds in rows:
        print(f"{label:34} {cpu:8.3f} {seconds:8.1f} {cpu / seconds:18.5f}")


if __name__ == "__main__":
    main()
