"""One microphone's sound, for the live feeds that play it (the effectful shell).

The microphone hands every chunk to :meth:`LiveSound.take` on the event loop, as it
emits it; that only counts the samples (:class:`~mediaflow.live.audio.SampleClock`)
and queues the chunk for :meth:`LiveSound.run`, which cuts it into 1024-sample slots:
encoded on a thread of its own while a feed is watched, the silent frame otherwise
(:mod:`mediaflow.live.audio`). The queue is bounded: if encoding falls behind, chunks
are left out of the live sound (counted in ``dropped``), never held against the
microphone. Each frame goes to every feed with its capture time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

import numpy as np

from mediaflow.live.audio import AacEncoder, Pcm, SampleClock, check_sound, silent_stream
from mediaflow.live.fmp4 import AudioTrack
from mediaflow.live.parts import AAC_FRAME_SAMPLES, AudioFrame

T = TypeVar("T")
log = logging.getLogger("mediaflow.live")
PcmListener = Callable[[Pcm, int, int, float], None]  # (pcm, rate, channels, captured_at)
QUEUE_CHUNKS = 64  # ~6 s of 100 ms chunks waiting for the encoder: then chunks are left out


class SoundSink(Protocol):
    """A live feed, as the sound sees it."""

    @property
    def watched(self) -> bool: ...

    def set_sound(self, track: AudioTrack | None) -> None:
        """The sound's format; None: this sound cannot be live (go on without it)."""

    def add_audio(self, frame: AudioFrame) -> None: ...


class LiveSound:
    """See the module doc. Use from the event loop that owns it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sinks: list[SoundSink] = []
        # Called with every chunk as it is taken, before any AAC work (WebRTC's Opus,
        # mediaflow.live.fanout); each must return at once.
        self.listeners: list[PcmListener] = []
        self.track: AudioTrack | None = None
        self.dropped = 0  # chunks left out of the live sound
        self.encoded = 0  # frames encoded (not silent)
        self.error: str | None = None  # why this sound cannot be live (rate, channels)
        self.encoding_failed = False  # then it goes on silent
        self._sound: tuple[int, int] | None = None
        self._silence = b""
        self._clock: SampleClock | None = None
        self._queue: deque[tuple[Pcm, int]] = deque()
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._encoder: AacEncoder | None = None
        self._held = np.zeros((0, 1), dtype=np.int16)  # samples from _held_start on
        self._held_start = 0  # a slot boundary
        self._expected = 0  # the first sample of the next chunk, if none is left out
        self._next_out = 0  # the first sample of the next slot handed to the sinks

    def take(self, pcm: Pcm, rate: int, channels: int, captured_at: float) -> None:
        """One chunk as the microphone emits it (``pcm`` shaped ``(frames, channels)``)."""
        for listener in tuple(self.listeners):
            listener(pcm, rate, channels, captured_at)
        if not self.sinks or self.error is not None:
            return
        if self._sound != (rate, channels):
            try:
                check_sound(rate, channels)
            except ValueError as exc:
                self.error = str(exc)
                log.warning("live view without the sound of %s: %s", self.name, exc)
                for sink in self.sinks:
                    sink.set_sound(None)
                return
            self._start(rate, channels)
        assert self._clock is not None
        first = self._clock.take(int(pcm.shape[0]), captured_at)
        if len(self._queue) >= QUEUE_CHUNKS:
            self.dropped += 1
            return
        self._queue.append((pcm, first))
        self._wake.set()
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self.run())

    def subscribe(self, sink: SoundSink) -> None:
        self.sinks.append(sink)
        if self.track is not None or self.error is not None:
            sink.set_sound(self.track)

    def unsubscribe(self, sink: SoundSink) -> None:
        with contextlib.suppress(ValueError):
            self.sinks.remove(sink)

    async def run(self) -> None:
        """Turn queued chunks into frames for the sinks, until :meth:`close`."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                pcm, first = self._queue.popleft()
                try:
                    slots = await self._slots(pcm, first)
                except Exception:  # an encoder error must not end the live sound
                    log.exception("live sound of %s: encoding failed, silence from now", self.name)
                    self.encoding_failed = True
                    boundary = first - first % AAC_FRAME_SAMPLES
                    self._restart_at(first, silent_from=min(self._next_out, boundary))
                    self._expected = first + int(pcm.shape[0])
                    slots = self._silent_slots(pcm)
                for sample, data in slots:
                    self._hand_out(sample, data)

    async def close(self) -> None:
        """Stop the worker and the encoding thread (the microphone stopped)."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        if self._thread is not None:
            self._thread.shutdown(wait=False)
            self._thread = None

    def _start(self, rate: int, channels: int) -> None:
        self._sound = (rate, channels)
        self.track, self._silence = silent_stream(rate, channels)
        self._clock = SampleClock(rate)
        self._held = np.zeros((0, channels), dtype=np.int16)
        self._held_start = self._next_out = self._expected = 0
        self._encoder = None
        self._queue.clear()
        for sink in self.sinks:
            sink.set_sound(self.track)

    async def _slots(self, pcm: Pcm, first: int) -> list[tuple[int, bytes]]:
        """The slots this chunk completes: encoded while watched, silent otherwise."""
        if first != self._expected:
            self._restart_at(first)  # chunks were left out: a hole in the sound
        self._expected = first + int(pcm.shape[0])
        if self.encoding_failed or not any(sink.watched for sink in self.sinks):
            if self._encoder is not None:
                # What the encoder still holds is not handed out: those slots go silent,
                # so the track stays continuous (no hole from the encoder's lag).
                self._restart_at(first, silent_from=self._next_out)
            return self._silent_slots(pcm)
        if self._encoder is None:
            pcm = np.concatenate([self._held, pcm])
            self._held = self._held[:0]
            self._encoder = await self._in_thread(self._new_encoder)
        encoder = self._encoder
        done = await self._in_thread(lambda: encoder.encode(pcm))
        self.encoded += len(done)
        return done

    def _new_encoder(self) -> AacEncoder:
        assert self._sound is not None
        return AacEncoder(*self._sound, first_sample=self._held_start)

    async def _in_thread(self, work: Callable[[], T]) -> T:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"live sound {self.name}")
        return await asyncio.get_running_loop().run_in_executor(self._thread, work)

    def _silent_slots(self, pcm: Pcm) -> list[tuple[int, bytes]]:
        if pcm.ndim != 2 or pcm.shape[1] != self._held.shape[1]:
            pcm = np.zeros((len(pcm), self._held.shape[1]), np.int16)  # only its length counts
        held = np.concatenate([self._held, pcm])
        whole = held.shape[0] // AAC_FRAME_SAMPLES
        slots = [(self._held_start + i * AAC_FRAME_SAMPLES, self._silence) for i in range(whole)]
        self._held = held[whole * AAC_FRAME_SAMPLES :]
        self._held_start += whole * AAC_FRAME_SAMPLES
        return slots

    def _restart_at(self, first: int, silent_from: int | None = None) -> None:
        """Go on from sample ``first`` after a hole: a new encoder, on the slot grid. The
        samples from ``silent_from`` (a slot boundary; default ``first``'s slot) are silence."""
        assert self._sound is not None
        self._encoder = None
        self._held_start = first - first % AAC_FRAME_SAMPLES if silent_from is None else silent_from
        self._held = np.zeros((first - self._held_start, self._sound[1]), dtype=np.int16)

    def _hand_out(self, sample: int, data: bytes) -> None:
        if sample < self._next_out or self._clock is None:
            return  # a new encoder's priming frame, over a slot already handed out
        frame = AudioFrame(data, self._clock.time_of(sample))
        for sink in self.sinks:
            sink.add_audio(frame)
        self._next_out = sample + AAC_FRAME_SAMPLES
