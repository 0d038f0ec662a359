"""The chaos bench's media: a WAV for the file microphone, a video for the file camera.

Both are made here, deterministically, so a run is reproducible from its seed and its
sizes alone:

* the WAV is 16-bit PCM at the microphone's rate, mono, generated with numpy: a tone
  whose pitch wanders plus seeded noise, so no two chunks are alike and a chunk
  delivered in the wrong place, twice or not at all changes the consumer's bytes;
* the video is lavfi's ``testsrc2`` (a moving test card with a running counter)
  encoded to H.264 in MP4 with PyAV, small, as long as the sound.

Blocking; a few seconds for a 17-minute stream.
"""

from __future__ import annotations

import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


def make_wav(path: Path, *, seconds: float, rate: int = 16000, seed: int = 0) -> Path:
    """Write ``seconds`` of distinctive mono s16 PCM at ``rate`` to ``path``."""
    rng = np.random.default_rng(seed)
    frames = round(seconds * rate)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        block = rate * 10  # ten seconds at a time: constant memory for long streams
        phase = 0.0
        for start in range(0, frames, block):
            n = min(block, frames - start)
            t = (start + np.arange(n)) / rate
            hz = 300.0 + 200.0 * np.sin(2 * np.pi * t / 7.3)  # a pitch that wanders
            phases = phase + 2 * np.pi * np.cumsum(hz) / rate
            phase = float(phases[-1])
            signal = 0.4 * np.sin(phases) + 0.05 * rng.standard_normal(n)
            out.writeframes((np.clip(signal, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def wav_samples(path: Path) -> bytes:
    """The PCM bytes of a WAV (s16 little-endian, interleaved)."""
    with wave.open(str(path), "rb") as wav:
        return wav.readframes(wav.getnframes())


def make_video(
    path: Path, *, seconds: float, fps: int = 10, size: tuple[int, int] = (160, 120)
) -> Path:
    """Encode ``seconds`` of lavfi ``testsrc2`` at ``fps`` and ``size`` to an H.264 MP4."""
    width, height = size
    graph = f"testsrc2=size={width}x{height}:rate={fps}:duration={seconds}"
    with av.open(graph, format="lavfi") as source, av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast", "g": str(2 * fps)}
        for index, frame in enumerate(source.decode(video=0)):
            frame = frame.reformat(format="yuv420p")
            # lavfi marks every frame a keyframe: unmark it, or each becomes an I-frame.
            frame.pict_type = av.video.frame.PictureType.NONE
            frame.pts, frame.time_base = index, Fraction(1, fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path
