"""The chaos bench's slow consumer: it writes down exactly which bytes it got.

``ChunkLog`` reads each audio chunk the microphone emitted, waits ``delay_s`` (a
consumer slower than its source, so a backlog waits in the queue when the engine is
killed), then appends one line per delivery to a log of its process's own
(``<log_dir>/<node>-<pid>.log``: a process killed mid-write cannot tear another's
line)::

    seq deliveries redelivery pid monotonic_ns pts discontinuity digest pcm_base64

:mod:`bench.chaos.check` rebuilds the consumer's byte stream from these lines. A
line is written before the item is acknowledged, so a kill after the write shows up
as a second line, which must then be marked as a redelivery.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import time
import wave
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from mediaflow import Context, MediaRef, Node


def wav_pcm(data: bytes) -> bytes:
    """The PCM frames of a WAV file's bytes."""
    with wave.open(io.BytesIO(data)) as wav:
        frames: bytes = wav.readframes(wav.getnframes())
    return frames


class ChunkLog(Node):
    """Logs every delivery of an ``audio`` chunk with its PCM (module doc)."""

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    def __init__(self, log_dir: str, delay_s: float = 0.0) -> None:
        self.log_dir = Path(log_dir)
        self.delay_s = float(delay_s)
        self._fd = -1

    async def setup(self, ctx: Context) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{ctx.node}-{os.getpid()}.log"
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size:  # a reused pid: never glue onto a torn line
            os.write(self._fd, b"\n")

    async def run(self, ctx: Context) -> None:
        ref = ctx.inputs["audio"]
        assert isinstance(ref, MediaRef) and ctx.item is not None
        pcm = wav_pcm(await ctx.read_artifact(ref))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        meta = ref.meta
        fields = (
            meta.get("seq"),
            ctx.item.deliveries,
            int(ctx.redelivery),
            os.getpid(),
            time.monotonic_ns(),
            meta.get("pts"),
            int(bool(meta.get("discontinuity"))),
            ref.digest.removeprefix("sha256:"),
            base64.b64encode(pcm).decode(),
        )
        # One write of one line: what a SIGKILL leaves is a whole line or a torn last one.
        os.write(self._fd, (" ".join(str(f) for f in fields) + "\n").encode())

    async def teardown(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
