"""The soak's flow: the demo's pieces at demo scale, run by ``mediaflow run``.

:func:`write_flow` writes a flow file built from the bundled demo's parts: two
virtual cameras (lavfi test pictures, JPEGs on ``image`` and H.264 segments on
``video``, as the demo's camera), eight virtual microphones each replaying the
demo's spoken commands in a loop at speaking pace, a ``speech`` node with the
demo's grammar on every microphone, and a ``recorder`` per camera muxing one
microphone in. The seed picks each microphone's chunk length and each camera's
test picture, so a run is repeatable and two seeds exercise different chunk sizes.

:mod:`bench._lib.flow_process` runs it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from bench._lib.demo import DEMO_DIR

CAMERA_PICTURES = ("testsrc2", "testsrc", "smptehdbars", "rgbtestsrc")
CHUNK_MS = (20, 50, 100, 200)


@dataclass(frozen=True)
class SoakFlow:
    """What the flow holds; the defaults are the demo's scale and settings."""

    cameras: int = 2
    microphones: int = 8
    size: str = "640x360"  # the demo camera's
    rate: int = 15
    fps: float = 5.0
    segment_s: float = 2.0
    clip_s: float = 4.0
    seed: int = 1


def flow_text(flow: SoakFlow, demo_dir: Path = DEMO_DIR) -> str:
    """The flow file (TOML) for ``flow``; paths into ``demo_dir`` are absolute."""
    pick = random.Random(flow.seed)
    speech = (demo_dir / "speech" / "commands.wav").as_posix()
    grammar = (demo_dir / "grammar" / "commands.gram").as_posix()
    parts = ['[flow]\nname = "soak"\n']
    for i in range(flow.cameras):
        picture = pick.choice(CAMERA_PICTURES)
        parts.append(
            f'[[node]]\nid = "cam{i}"\nconnector = "camera"\n'
            f'device = "lavfi:{picture}=size={flow.size}:rate={flow.rate}"\n'
            f'fps = {flow.fps}\nsegment_s = {flow.segment_s}\ncodec = "h264"\n'
        )
    for i in range(flow.microphones):
        parts.append(
            f'[[node]]\nid = "mic{i}"\nconnector = "microphone"\ndevice = "file:{speech}"\n'
            f"chunk_ms = {pick.choice(CHUNK_MS)}\nrealtime = true\nloop = true\n"
        )
        parts.append(
            f'[[node]]\nid = "asr{i}"\nuse = "speech"\ngrammar = "{grammar}"\n'
            f'inputs = {{ audio = "mic{i}.audio" }}\n'
        )
    for i in range(flow.cameras):
        mic = i % flow.microphones
        parts.append(
            f'[[node]]\nid = "rec{i}"\nuse = "recorder"\nclip_s = {flow.clip_s}\n'
            f'inputs = {{ video = "cam{i}.video", audio = "mic{mic}.audio" }}\n'
        )
    return "\n".join(parts)


def write_flow(directory: Path, flow: SoakFlow) -> Path:
    """Write ``soak.toml`` into ``directory`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "soak.toml"
    path.write_text(flow_text(flow))
    return path
