"""Emitting an audio source: one ``audio/wav`` chunk per ``chunk_ms`` on ``audio``.

Shared by the microphone, file and URL connectors. Devices deliver exact chunks of
s16 PCM already resampled to the requested rate and channels; here each becomes a WAV
artifact (a few kilobytes: encoded on the event loop, saved through a thread) with
``rate``, ``channels``, ``duration``, ``overflows`` and the capture facts in its meta.
Chunks a live device dropped for a slow consumer, or a device loss, leave a hole in
the sound: the next chunk says so (``discontinuity``, ``gap_s``) while ``seq`` stays
gap-free. PortAudio overflows are counted into ``overflows`` and reported as
``audio_overflow`` events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from connectors._emit import CounterReport, PortEmitter
from connectors._reconnect import Reconnect, SourceRun
from connectors._timeline import Epoch, Resume
from devices import AudioChunk, AudioInput, encode_wav, open_microphone
from mediaflow import Context


@dataclass(frozen=True)
class AudioRequest:
    """How to open an audio source (see :func:`devices.open_microphone`)."""

    spec: str
    rate: int = 16000
    channels: int = 1
    chunk_ms: int = 100
    realtime: bool | None = None

    def open(self, start_s: float = 0.0) -> AudioInput:
        """Open the source (blocks: call it in a thread); a file from ``start_s``. Raises
        what :func:`devices.open_microphone` raises; unknown devices list the available."""
        return open_microphone(
            self.spec,
            rate=self.rate,
            channels=self.channels,
            chunk_ms=self.chunk_ms,
            realtime=self.realtime,
            start_s=start_s,
        )

    async def open_async(self, start_s: float = 0.0) -> AudioInput:
        return await asyncio.to_thread(self.open, start_s)


class AudioRun(SourceRun[AudioInput]):
    """One run of an audio source: read chunks, emit them, survive device losses."""

    def __init__(
        self,
        ctx: Context,
        device: str,
        resume: Resume | None,
        *,
        port: str = "audio",
        seeked_at: float | None = None,
    ) -> None:
        super().__init__(ctx, device, resume, seeked_at=seeked_at)
        self.chunks = PortEmitter(ctx, port, device, resume)
        self.report = CounterReport(ctx, "audio_overflow", device)
        self._closed_overflows = 0  # overflow totals of inputs already closed
        self._closed_dropped = 0
        self.live = ctx.more.live.sound(ctx.flow, ctx.node)  # heard only by feeds with sound

    async def run(
        self, first: AudioInput, *, policy: Reconnect, reopen: Callable[[], Awaitable[AudioInput]]
    ) -> None:
        """Emit until the source ends (a file) or the flow stops. Raises the source's
        error (a live device's loss is handled: see :mod:`connectors._reconnect`)."""
        try:
            await self.supervise(first, policy=policy, reopen=reopen)
        finally:
            self.report.update(self._counters(None, None), force=True)
            await self.live.close()

    async def consume(self, source: AudioInput) -> None:
        epoch: Epoch | None = None
        last_index = -1
        anchor = 0.0  # wall clock of this input's pts 0
        latest: AudioChunk | None = None
        try:
            async for chunk in source:
                if self.ctx.stopping():
                    return
                if epoch is None:
                    epoch = self.timeline.begin()
                    # A chunk arrives once complete: it began a chunk's length ago.
                    anchor = time.time() - chunk.pts - chunk.duration
                elif chunk.index != last_index + 1:
                    # The device bridge dropped chunks for a slow consumer: a hole.
                    epoch = self.timeline.split(epoch, chunk.pts - latest_end(latest))
                last_index, latest = chunk.index, chunk
                await self._emit(chunk, epoch, anchor)
                self.report.update(self._counters(source, chunk))
        finally:
            self._closed_overflows += latest.overflow_count if latest is not None else 0
            self._closed_dropped += source.statistics().bridge.dropped

    async def _emit(self, chunk: AudioChunk, epoch: Epoch, anchor: float) -> None:
        pts = chunk.pts + epoch.offset
        self.timeline.seen(pts, chunk.duration)
        captured_at = anchor + chunk.pts
        facts = {
            "pts": round(pts, 6),
            "captured_at": captured_at,
            "duration": chunk.duration,
            "rate": chunk.rate,
            "channels": chunk.channels,
            "overflows": self._closed_overflows + chunk.overflow_count,
        }
        self.live.take(chunk.pcm, chunk.rate, chunk.channels, captured_at)
        await self.chunks.emit(encode_wav(chunk), "audio/wav", epoch, facts)

    def _counters(self, source: AudioInput | None, chunk: AudioChunk | None) -> dict[str, int]:
        overflows = self._closed_overflows + (chunk.overflow_count if chunk is not None else 0)
        dropped = self._closed_dropped
        if source is not None:
            dropped += source.statistics().bridge.dropped
        return {"overflows": overflows, "dropped": dropped}


def latest_end(chunk: AudioChunk | None) -> float:
    """Input pts just after ``chunk`` (0 before the first)."""
    return 0.0 if chunk is None else chunk.pts + chunk.duration
