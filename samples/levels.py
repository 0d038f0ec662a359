"""Nodes for ``samples/levels.toml``: a synthetic tone source and a loudness meter.

A starting point for your own nodes: the source saves each chunk as an
``audio/wav`` artifact and emits the reference; the meter reads the bytes back
and emits one number per chunk, measured as the built-in ``use = "loudness"``
node measures it (which also finds loud stretches: docs/nodes.md).
"""

from __future__ import annotations

import io
import math
import time
import wave
from collections.abc import Mapping
from typing import Any

import numpy as np

from mediaflow import Context, MediaRef, Node
from mediaflow.nodes.loudness import dbfs


class ToneSource(Node):
    """Emits ``chunks`` chunks of a sine tone whose loudness rises and falls."""

    outputs = {"audio": "audio"}

    def __init__(
        self, chunks: int = 50, chunk_ms: int = 100, rate: int = 16000, frequency: float = 440.0
    ) -> None:
        if chunks < 1 or chunk_ms < 1 or rate < 1:
            raise ValueError("chunks, chunk_ms and rate must be positive")
        self.chunks = chunks
        self.chunk_ms = chunk_ms
        self.rate = rate
        self.frequency = frequency

    async def run(self, ctx: Context) -> None:
        frames = self.rate * self.chunk_ms // 1000
        started = time.time()
        for seq in range(self.chunks):
            if ctx.stopping():
                return
            t = (np.arange(frames) + seq * frames) / self.rate
            gain = 0.1 + 0.8 * abs(math.sin(math.pi * seq / max(self.chunks - 1, 1)))
            pcm = (gain * 32767 * np.sin(2 * math.pi * self.frequency * t)).astype("<i2")
            buffer = io.BytesIO()
            with wave.open(buffer, "wb") as wav:
                wav.setnchannels(1)
                wav.setsampwidth(2)
                wav.setframerate(self.rate)
                wav.writeframes(pcm.tobytes())
            pts = seq * self.chunk_ms / 1000
            ref = await ctx.save_artifact(
                buffer.getvalue(),
                "audio/wav",
                meta={
                    "source": ctx.node,
                    "seq": seq,
                    "pts": pts,
                    "captured_at": started + pts,
                    "duration": self.chunk_ms / 1000,
                    "rate": self.rate,
                    "channels": 1,
                },
            )
            await ctx.emit("audio", ref)


class Loudness(Node):
    """One RMS level (dBFS) per audio chunk."""

    inputs = {"audio": "audio"}
    outputs = {"rms_dbfs": "number"}

    def __init__(self, floor: float = -90.0) -> None:
        self.floor = floor

    async def run(self, ctx: Context) -> Mapping[str, Any]:
        ref = ctx.inputs["audio"]
        assert isinstance(ref, MediaRef)
        with wave.open(io.BytesIO(await ctx.read_artifact(ref))) as wav:
            pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
        return {"rms_dbfs": round(dbfs(pcm, floor=self.floor), 2)}
