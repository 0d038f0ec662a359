"""The scale benchmark's flow: N 720p30 virtual cameras, M speaking microphones, one recorder.

Each camera is a lavfi ``testsrc2`` picture at 1280x720, 30 frames/s, paced in real
time through the same code path as ``/dev/video0``: a JPEG of every frame on ``image``
(``fps = 30``) and 2 s H.264 segments on ``video`` (``video = true``: encoded
whether or not a node reads them). Each microphone replays the demo's
spoken commands (16 kHz mono) in a loop at speaking pace, in 100 ms chunks, into a
``speech`` node with the demo's grammar. One ``recorder`` joins the first camera's
segments into clips with the first microphone's audio. What the flow should produce
each second (:meth:`ScaleFlow.rates`) is what the judge holds a run to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench._lib.demo import DEMO_DIR

FLOW_NAME = "scale"


@dataclass(frozen=True)
class ScaleFlow:
    """One rung of the ladder; the other fields are the issue's 720p30 and 16 kHz."""

    cameras: int
    microphones: int
    size: str = "1280x720"
    rate: int = 30  # camera frames per second
    fps: float = 30.0  # JPEGs per second
    segment_s: float = 2.0
    chunk_ms: int = 100
    clip_s: float = 10.0
    recorders: int = 1

    @property
    def label(self) -> str:
        return f"{self.cameras} cam + {self.microphones} mic"

    def sources(self) -> dict[str, dict[str, float]]:
        """Every source's ports and how many items each should emit per second."""
        rates: dict[str, dict[str, float]] = {}
        for i in range(self.cameras):
            rates[f"cam{i}"] = {"image": self.fps, "video": 1.0 / self.segment_s}
        for i in range(self.microphones):
            rates[f"mic{i}"] = {"audio": 1000.0 / self.chunk_ms}
        return rates

    def consumers(self) -> dict[str, float]:
        """Every consumer node and the items per second it must start to keep up."""
        chunks = 1000.0 / self.chunk_ms
        rates = {f"asr{i}": chunks for i in range(self.microphones)}
        for i in range(min(self.recorders, self.cameras)):
            rates[f"rec{i}"] = (chunks if self.microphones else 0.0) + 1.0 / self.segment_s
        return rates


def flow_text(flow: ScaleFlow, demo_dir: Path = DEMO_DIR) -> str:
    """The flow file (TOML) for ``flow``; paths into ``demo_dir`` are absolute."""
    speech = (demo_dir / "speech" / "commands.wav").as_posix()
    grammar = (demo_dir / "grammar" / "commands.gram").as_posix()
    parts = [f'[flow]\nname = "{FLOW_NAME}"\n']
    for i in range(flow.cameras):
        parts.append(
            f'[[node]]\nid = "cam{i}"\nconnector = "camera"\n'
            f'device = "lavfi:testsrc2=size={flow.size}:rate={flow.rate}"\n'
            f'fps = {flow.fps}\nsegment_s = {flow.segment_s}\ncodec = "h264"\nvideo = true\n'
        )
    for i in range(flow.microphones):
        parts.append(
            f'[[node]]\nid = "mic{i}"\nconnector = "microphone"\ndevice = "file:{speech}"\n'
            f"chunk_ms = {flow.chunk_ms}\nrealtime = true\nloop = true\n"
        )
        parts.append(
            f'[[node]]\nid = "asr{i}"\nuse = "speech"\ngrammar = "{grammar}"\n'
            f'inputs = {{ audio = "mic{i}.audio" }}\n'
        )
    for i in range(min(flow.recorders, flow.cameras)):
        inputs = f'video = "cam{i}.video"'
        if flow.microphones:
            inputs += f', audio = "mic{i % flow.microphones}.audio"'
        parts.append(
            f'[[node]]\nid = "rec{i}"\nuse = "recorder"\nclip_s = {flow.clip_s}\n'
            f"inputs = {{ {inputs} }}\n"
        )
    return "\n".join(parts)


def write_flow(directory: Path, flow: ScaleFlow) -> Path:
    """Write ``scale.toml`` into ``directory`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "scale.toml"
    path.write_text(flow_text(flow))
    return path
