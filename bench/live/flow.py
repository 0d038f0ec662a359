"""The live benchmark's flow: a 720p30 camera with a flash, a microphone with a beep.

The camera is a lavfi ``testsrc2`` picture at 1280x720, 30 frames/s, paced in real
time like ``/dev/video0``, with a white box (:data:`BOX`) drawn over its top-left
corner for the first 0.1 s of every second of the source's clock (``drawbox`` with
``enable``): a *flash* starts on source frames 0, 30, 60 ... It publishes JPEGs at
``fps`` (5: the wall's picture, kept small so the live stream's cost stands out) and
H.264 segments (the live view reads them), with ``live_audio = "mic"``.

The microphone is a lavfi ``aevalsrc`` at 16 kHz, evaluated per sample: a 1 kHz sine
for the first 0.1 s of every second of its clock, silence otherwise (a *beep* starts
on samples 0, 16000, 32000 ...). ``sine`` + ``volume`` would gate per 1024-sample
frame, so its onsets would fall up to 64 ms off the second. A recorder joins the
camera's segments and the microphone's chunks, as in the bundled demo.

Source time ``k`` seconds is captured at ``captured_at - pts + k`` by the items'
meta: the benchmark holds the live stream to that. Two independent sources have no
common truth beyond those facts, so a second, small flow replays a clip whose
flashes and beeps are made at the same media times (:func:`make_clip`) with the file
connector, which carries the file's own sound live: there the offset between a
flash and its beep in the live stream is the A/V offset a viewer sees, against the
file itself.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

FLOW_NAME = "live"
CAMERA = "cam"
MICROPHONE = "mic"
BOX = 160  # the flash's square, pixels from the top-left corner
FLASH_S = 0.1  # how long a flash and a beep last, each second
BEEP_HZ = 1000
BEEP_LEVEL = 0.5


@dataclass(frozen=True)
class LiveFlow:
    """The flow's settings; the defaults are the issue's 720p30 and 16 kHz."""

    size: str = "1280x720"
    rate: int = 30  # camera frames per second
    fps: float = 5.0  # JPEGs per second
    segment_s: float = 2.0  # the GOP, too: a keyframe starts each segment
    audio_rate: int = 16000
    chunk_ms: int = 100
    clip_s: float = 10.0

    def camera_graph(self) -> str:
        """The lavfi graph of the camera (quoted commas: one graph, two filters)."""
        flash = f"enable='lt(mod(t,1),{FLASH_S})'"
        box = f"drawbox=x=0:y=0:w={BOX}:h={BOX}:color=white:t=fill:{flash}"
        return f"testsrc2=size={self.size}:rate={self.rate},{box}"

    def microphone_graph(self) -> str:
        """The lavfi graph of the microphone: a gated sine, sample-accurate."""
        beep = f"if(lt(mod(t,1),{FLASH_S}),{BEEP_LEVEL}*sin(2*PI*{BEEP_HZ}*t),0)"
        return f"aevalsrc=exprs='{beep}':s={self.audio_rate}"


def flow_text(flow: LiveFlow) -> str:
    """The flow file (TOML) for ``flow``."""
    return "\n".join(
        [
            f'[flow]\nname = "{FLOW_NAME}"\n',
            f'[[node]]\nid = "{CAMERA}"\nconnector = "camera"\n'
            f'device = "lavfi:{flow.camera_graph()}"\n'
            f'fps = {flow.fps}\nsegment_s = {flow.segment_s}\ncodec = "h264"\n'
            f'realtime = true\nlive_audio = "{MICROPHONE}"\n',
            f'[[node]]\nid = "{MICROPHONE}"\nconnector = "microphone"\n'
            f'device = "lavfi:{flow.microphone_graph()}"\n'
            f"rate = {flow.audio_rate}\nchunk_ms = {flow.chunk_ms}\nrealtime = true\n",
            f'[[node]]\nid = "rec"\nuse = "recorder"\nclip_s = {flow.clip_s}\n'
            f'inputs = {{ video = "{CAMERA}.video", audio = "{MICROPHONE}.audio" }}\n',
        ]
    )


def write_flow(directory: Path, flow: LiveFlow) -> Path:
    """Write ``live.toml`` into ``directory`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "live.toml"
    path.write_text(flow_text(flow))
    return path


CLIP_FLOW_NAME = "clip"
CLIP_NODE = "clip"


def make_clip(path: Path, flow: LiveFlow, seconds: float) -> Path:
    """Write a clip whose picture flashes and whose sound beeps at the same media
    times (the camera's and the microphone's graphs, 640x360, PCM sound), with
    ffmpeg (blocks). Raises ``FileNotFoundError`` without ffmpeg and
    ``subprocess.CalledProcessError`` if it fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    small = LiveFlow(size="640x360", rate=flow.rate, audio_rate=flow.audio_rate)
    command = [
        "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error",
        "-f", "lavfi", "-i", small.camera_graph(), "-f", "lavfi", "-i", small.microphone_graph(),
        "-t", f"{seconds:g}", "-c:v", "libx264", "-preset", "veryfast", "-bf", "0",
        "-g", str(flow.rate), "-c:a", "pcm_s16le", "-y", str(path),
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    return path


def clip_flow_text(clip: Path, flow: LiveFlow) -> str:
    """A flow replaying ``clip`` in real time with its own sound, live (the file
    connector carries a file's sound in its live view), and a recorder."""
    return "\n".join(
        [
            f'[flow]\nname = "{CLIP_FLOW_NAME}"\n',
            f'[[node]]\nid = "{CLIP_NODE}"\nconnector = "file"\npath = "{clip.as_posix()}"\n'
            f'fps = {flow.fps}\nsegment_s = {flow.segment_s}\ncodec = "h264"\n'
            f"rate = {flow.audio_rate}\nchunk_ms = {flow.chunk_ms}\n",
            f'[[node]]\nid = "rec"\nuse = "recorder"\nclip_s = {flow.clip_s}\n'
            f'inputs = {{ video = "{CLIP_NODE}.video", audio = "{CLIP_NODE}.audio" }}\n',
        ]
    )


def write_clip_flow(directory: Path, clip: Path, flow: LiveFlow) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "clip.toml"
    path.write_text(clip_flow_text(clip, flow))
    return path
