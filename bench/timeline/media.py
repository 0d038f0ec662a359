"""Recordings to export, and reading back what an export shows.

- :func:`make_source`: an H.264 + AAC file whose every picture says its frame number
  (a grid of 32 black or white blocks, one bit each) and whose sound beeps (1 kHz,
  0.1 s) at every whole second, i.e. with frames ``k * fps``: made with PyAV.
- :func:`record`: ``mediaflow run`` of a flow whose camera copies that file
  (``realtime = false``, so a minute records in about a second) into a recorder.
- :func:`retime`: the recorded clips laid on the source's own clock. A source read
  faster than real time is stamped with the time each frame *arrived*, so its clips
  overlap on the wall clock; a camera's clips are back to back. The index's rows of
  the recording are replaced by ``origin`` + the clips' running total of lengths.
- :func:`frame_number`, :func:`shown`, :func:`beep_onsets`: what a file shows.

The tests (``tests/test_timeline_export.py``) use these too.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from mediaflow.timeline import RecordedClip, TimelineIndex

BITS = 32  # 8 columns x 4 rows of blocks
COLUMNS, ROWS = 8, 4
BEEP_HZ, BEEP_S = 1000.0, 0.1

FLOW_FILE = """\
[flow]
name = "{flow}"

[[node]]
id = "cam"
connector = "camera"
device = "file:{source}"
realtime = false
fps = 1
segment_s = {segment_s}
video = true

[[node]]
id = "rec"
use = "recorder"
clip_s = {clip_s}
inputs = {{ video = "cam.video" }}
"""


def make_source(
    path: Path,
    seconds: float,
    *,
    size: tuple[int, int] = (320, 240),
    fps: int = 15,
    keyint: int = 15,
    rate: int = 16000,
    grain: int = 0,
    bit_rate: int | None = None,
) -> None:
    """Write the numbered, beeping source (module doc). Blocks.

    ``grain``: luma noise of up to that many levels on every picture (7 patterns in
    turn), so the encoder has a camera's detail to spend ``bit_rate`` (bits/s) on; the
    blocks' centres still read (16 or 235, against a threshold of 128)."""
    width, height = size
    frames = round(seconds * fps)
    rng = np.random.default_rng(7)
    noise = rng.integers(-grain, grain + 1, (7, height, width), np.int16) if grain else None
    with av.open(str(path), "w") as out:
        video = out.add_stream(
            "libx264",
            rate=fps,
            options={"preset": "ultrafast", "g": str(keyint), "keyint_min": str(keyint),
                     "sc_threshold": "0", "bf": "0"},
        )  # fmt: skip
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        if bit_rate:
            video.bit_rate = bit_rate
        audio = out.add_stream("aac", rate=rate, layout="mono")
        plane = np.full((height * 3 // 2, width), 128, np.uint8)
        for number in range(frames):
            _draw(plane[:height], number)
            if noise is not None:
                plane[:height] = np.clip(plane[:height] + noise[number % 7], 0, 255)
            frame = av.VideoFrame.from_ndarray(plane, format="yuv420p")
            frame.pts, frame.time_base = number, Fraction(1, fps)
            frame.pict_type = av.video.frame.PictureType.NONE
            for packet in video.encode(frame):
                out.mux(packet)
        for packet in video.encode(None):
            out.mux(packet)
        times = np.arange(round(seconds * rate)) / rate
        beeping = (times % 1.0) < BEEP_S
        pcm = np.where(beeping, 0.5 * np.sin(2 * np.pi * BEEP_HZ * times), 0.0)
        pcm = pcm.astype(np.float32)
        for at in range(0, len(pcm), 1024):
            chunk = av.AudioFrame.from_ndarray(
                pcm[at : at + 1024].reshape(1, -1), format="flt", layout="mono"
            )
            chunk.sample_rate, chunk.pts, chunk.time_base = rate, at, Fraction(1, rate)
            for packet in audio.encode(chunk):
                out.mux(packet)
        for packet in audio.encode(None):
            out.mux(packet)


def _draw(luma: np.ndarray, number: int) -> None:
    height, width = luma.shape
    block_w, block_h = width // COLUMNS, height // ROWS
    for bit in range(BITS):
        row, column = divmod(bit, COLUMNS)
        value = 235 if (number >> bit) & 1 else 16
        luma[row * block_h : (row + 1) * block_h, column * block_w : (column + 1) * block_w] = value


def frame_number(frame: av.VideoFrame) -> int:
    """The number a picture of :func:`make_source` shows (block centres, so a codec's
    blur at the edges does not matter)."""
    luma = frame.to_ndarray(format="gray")
    height, width = luma.shape
    block_w, block_h = width // COLUMNS, height // ROWS
    number = 0
    for bit in range(BITS):
        row, column = divmod(bit, COLUMNS)
        y, x = row * block_h + block_h // 2, column * block_w + block_w // 2
        if luma[y - 2 : y + 3, x - 2 : x + 3].mean() > 128:
            number |= 1 << bit
    return number


@dataclass(frozen=True)
class Shown:
    """What decoding a file shows: ``(time, frame number)`` per picture, sound beeps."""

    frames: list[tuple[float, int]]
    beeps: list[float]  # seconds (file time) where a beep starts
    audio_start: float | None


def shown(path: Path, *, sound: bool = True) -> Shown:
    """Decode ``path`` as a player does (edit lists applied by FFmpeg's demuxer)."""
    with av.open(str(path)) as container:
        frames = [(float(f.time or 0.0), frame_number(f)) for f in container.decode(video=0)]
    beeps: list[float] = []
    audio_start = None
    if sound:
        with av.open(str(path)) as container:
            if container.streams.audio:
                chunks = list(container.decode(audio=0))
                if chunks:
                    audio_start = float(chunks[0].time or 0.0)
                    rate = chunks[0].sample_rate
                    pcm = np.concatenate([c.to_ndarray()[0] for c in chunks])
                    beeps = [audio_start + at / rate for at in beep_onsets(pcm, rate)]
    return Shown(frames, beeps, audio_start)


def beep_onsets(pcm: np.ndarray, rate: int) -> list[int]:
    """Sample indices where a beep starts: the level (5 ms windows) first over half
    the beep's, after at least 0.3 s below it."""
    window = max(1, rate // 200)
    level = np.sqrt(np.convolve(pcm.astype(np.float64) ** 2, np.ones(window) / window, "same"))
    loud = level > 0.5 * 0.5 / np.sqrt(2)
    onsets: list[int] = []
    last = -rate
    for index in np.flatnonzero(loud[1:] & ~loud[:-1]) + 1:
        if index - last > 0.3 * rate:
            onsets.append(int(index))
        last = int(index)
    return onsets


def record(
    source: Path,
    data_dir: Path,
    *,
    flow: str = "rec",
    segment_s: float = 2.0,
    clip_s: float = 6.0,
    timeout: float = 300.0,
) -> None:
    """Record ``source`` through ``mediaflow run --until-idle`` into ``data_dir``."""
    flow_file = data_dir.parent / f"{flow}.toml"
    flow_file.write_text(
        FLOW_FILE.format(flow=flow, source=source.resolve(), segment_s=segment_s, clip_s=clip_s)
    )
    subprocess.run(
        [sys.executable, "-m", "mediaflow", "-q", "run", str(flow_file), "--until-idle",
         "--data", str(data_dir)],
        check=True, timeout=timeout,
    )  # fmt: skip


def retime(data_dir: Path, flow: str, node: str, origin: float) -> list[RecordedClip]:
    """Lay the recorded clips back to back from ``origin`` (module doc); the new rows."""
    index = TimelineIndex.in_data_dir(data_dir)
    try:
        clips = index.clips(flow, node, float("-inf"), float("inf"))
        clips.sort(key=lambda clip: clip.ref.meta.get("seq", 0))
        with sqlite3.connect(index.path) as db:  # the index has no delete: rows by hand
            db.execute("DELETE FROM clips WHERE flow = ? AND node = ?", (flow, node))
        placed = []
        at = origin
        for clip in clips:
            moved = RecordedClip(flow, node, at, at + clip.duration, clip.ref, clip.sources)
            index.note_clip(moved)
            placed.append(moved)
            at += clip.duration
        return placed
    finally:
        index.close()
