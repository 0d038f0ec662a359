"""The edge box's flow: a real-time lavfi camera, a real-time file microphone and
their two consumers (:mod:`bench.edge.nodes`), written to a TOML file.

The camera is lavfi ``testsrc2`` (a moving test card) of ``size`` at twice ``fps``,
publishing a JPEG ``fps`` times a second; the microphone replays a WAV of seeded
noise (every chunk different, so the store keeps each) in ``chunk_ms`` chunks. Both
are paced in real time and end after ``seconds``: the run then drains and exits
(``--until-idle``), so the bench can check that every item arrived.
"""

from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FLOW = "edge"
CAMERA, MICROPHONE = "cam", "mic"
CONSUMERS = {"frames": (CAMERA, "image"), "chunks": (MICROPHONE, "audio")}
"""Each consumer node and the source port it reads: one forwarded stream each."""


@dataclass(frozen=True)
class EdgeFlow:
    size: str = "640x360"
    fps: int = 5
    chunk_ms: int = 100
    rate: int = 16000

    @property
    def items_per_s(self) -> float:
        """Items the sources put in the forwarded streams a second, nominally."""
        return self.fps + 1000 / self.chunk_ms


def write_wav(path: Path, seconds: float, rate: int) -> Path:
    """``seconds`` of seeded noise, mono s16, written in ten-second blocks."""
    rng = np.random.default_rng(27)
    frames = round(seconds * rate)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        for start in range(0, frames, rate * 10):
            n = min(rate * 10, frames - start)
            out.writeframes(rng.integers(-8000, 8000, n, dtype="<i2").tobytes())
    return path


def write_flow(place: Path, flow: EdgeFlow, seconds: float) -> Path:
    """The flow file (and its WAV) in ``place`` for a capture of ``seconds``."""
    place.mkdir(parents=True, exist_ok=True)
    wav = write_wav(place / "mic.wav", seconds, flow.rate)
    graph = f"testsrc2=size={flow.size}:rate={2 * flow.fps}:duration={seconds:.0f}"
    path = place / "edge.toml"
    path.write_text(
        f'[flow]\nname = "{FLOW}"\n\n'
        f'[[node]]\nid = "{CAMERA}"\nconnector = "camera"\ndevice = "lavfi:{graph}"\n'
        f"fps = {flow.fps}\n\n"
        f'[[node]]\nid = "{MICROPHONE}"\nconnector = "microphone"\ndevice = "file:{wav}"\n'
        f"rate = {flow.rate}\nchunk_ms = {flow.chunk_ms}\n\n"
        '[[node]]\nid = "frames"\nuse = "bench.edge.nodes:Frames"\n'
        f'inputs = {{ image = "{CAMERA}.image" }}\n\n'
        '[[node]]\nid = "chunks"\nuse = "bench.edge.nodes:Chunks"\n'
        f'inputs = {{ audio = "{MICROPHONE}.audio" }}\n'
    )
    return path
