"""What a WebRTC publisher sends, as a camera's and a microphone's inputs.

A WebRTC receiver (aiortc's ``RemoteStreamTrack``, or anything with an async
``recv()``: :class:`FrameTrack`) decodes on its own thread and hands decoded frames
to asyncio. :func:`open_track_video` and :func:`open_track_audio` wrap one such track
in the inputs a camera and a microphone have (:class:`TrackVideoInput` yields
:class:`~devices.video_input.CapturedFrame`, an :class:`~devices.audio_input.AudioInput`
yields exact :class:`~devices.audio_chunks.AudioChunk` records), so the connectors
emit a publisher through the paths they emit a camera through.

A producer thread per track pulls the frames off the event loop
(``run_coroutine_threadsafe(track.recv())``, its future always waited and checked)
as fast as they come, and puts them in a bounded :class:`~devices.bridge.FrameBridge`
with the live devices' policy, ``drop_oldest``: a publisher sending faster than the
flow takes its frames loses the oldest ones (counted in ``statistics().bridge.dropped``),
never grows a queue. The receiver's own queue of decoded frames stays near empty
because this thread never waits for room.

Outcomes are a live device's: frames, then :class:`~devices.errors.DeviceLost` when
the track ends (the peer hung up or its connection failed) or sends nothing for
``idle_s`` (a publisher killed mid-stream sends no goodbye; WebRTC's own consent
check would notice only after ~30 s). The first frame may take ``first_s`` (ICE and
DTLS come first). Nothing here imports aiortc.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, Protocol

import av

from devices.audio_chunks import AudioChunk, Chunker, PcmResampler, channel_layout
from devices.audio_input import AudioInfo, AudioInput
from devices.bridge import FrameBridge
from devices.errors import BridgeClosed, DeviceLost
from devices.threaded import ThreadedInput
from devices.video_info import VideoInfo
from devices.video_input import CapturedFrame, VideoStatistics

# A killed publisher is noticed within this; Chromium and aiortc send video at least
# every second even for a still picture, and Opus without DTX every 20 ms.
IDLE_S = 3.0
# ICE checks and the DTLS handshake before the first frame: well under a second on a
# LAN; a publisher that never gets there is lost after this.
FIRST_S = 10.0
POLL_S = 0.25  # how often a producer waiting for a frame looks at a close
VIDEO_BUFFER = 4  # frames (a camera's: the freshest matter)
AUDIO_BUFFER_S = 5.0  # of chunks, as a microphone keeps


class FrameTrack(Protocol):
    """A WebRTC receiver's track: ``recv()`` the next decoded frame, raising when it ends."""

    kind: str

    async def recv(self) -> Any: ...


class _TrackPuller:
    """Pulls a track's frames from a producer thread; each wait bounded (see module doc)."""

    def __init__(
        self,
        spec: str,
        track: FrameTrack,
        loop: asyncio.AbstractEventLoop,
        *,
        idle_s: float,
        first_s: float,
        lost: threading.Event | None,
    ) -> None:
        self.spec = spec
        self._lost = lost
        self._track = track
        self._loop = loop
        self._idle_s = idle_s
        self._first_s = first_s

    def frames(self, bridge: FrameBridge[Any]) -> Iterator[Any]:
        """Frames until the track ends or goes quiet (``DeviceLost``); stops at a close
        (``BridgeClosed``). Blocks: runs on the producer thread."""
        wait_s = self._first_s
        while True:
            yield self._next(bridge, wait_s)
            wait_s = self._idle_s

    def _next(self, bridge: FrameBridge[Any], wait_s: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(self._track.recv(), self._loop)
        deadline = time.monotonic() + wait_s
        try:
            while True:
                try:
                    return future.result(min(POLL_S, max(0.0, deadline - time.monotonic())))
                except concurrent.futures.TimeoutError:
                    if bridge.closed:
                        raise BridgeClosed("input closed") from None
                    if time.monotonic() >= deadline:
                        quiet = TimeoutError(f"no {self._track.kind} for {wait_s:g} s")
                        raise DeviceLost(self.spec, quiet) from None
        except BridgeClosed:
            future.cancel()
            raise
        except DeviceLost:
            future.cancel()
            self._note_lost()
            raise
        except Exception as exc:  # the track ended (aiortc's MediaStreamError) or failed
            self._note_lost()
            raise DeviceLost(self.spec, exc) from exc

    def _note_lost(self) -> None:
        if self._lost is not None:
            self._lost.set()


def _seconds(frame: av.VideoFrame | av.AudioFrame) -> float | None:
    if frame.pts is None or frame.time_base is None:
        return None
    return float(frame.pts * Fraction(frame.time_base))


class TrackVideoInput(ThreadedInput[CapturedFrame]):
    """A publisher's video track as a live camera: decoded frames, ``pts`` from 0."""

    def __init__(self, spec: str, puller: _TrackPuller, maxsize: int) -> None:
        super().__init__(spec, FrameBridge(maxsize, "drop_oldest"))
        self._puller = puller
        # The size comes with the first frame (and may change: the segments follow it).
        self.info = VideoInfo(
            spec, "webrtc", 0, 0, None, "webrtc", None, True, passthrough=False, duration=None
        )
        self._produced = 0

    def statistics(self) -> VideoStatistics:
        """Frames produced, bridge state (a receiver counts its own decode errors)."""
        return VideoStatistics(self._produced, 0, self._bridge.statistics())

    def _release(self) -> None:
        """Nothing to release: the peer connection belongs to whoever opened it."""

    def _produce(self, bridge: FrameBridge[CapturedFrame]) -> None:
        started = time.monotonic()
        origin: float | None = None
        for frame in self._puller.frames(bridge):
            if not isinstance(frame, av.VideoFrame):
                continue
            when = _seconds(frame)
            if when is None:
                when = time.monotonic() - started
            if origin is None:
                origin = when
            pts = max(0.0, when - origin)
            bridge.put(
                CapturedFrame(
                    frame, None, pts, self._produced, frame.width, frame.height, time.time()
                )
            )
            self._produced += 1


class TrackAudioSource:
    """A publisher's audio track resampled and cut into exact chunks on the producer
    thread (the ``AudioInput`` source protocol); ``pts`` counts samples from 0."""

    def __init__(self, puller: _TrackPuller, *, rate: int, channels: int, chunk_ms: int) -> None:
        self._puller = puller
        self._rate = rate
        self._channels = channels
        self._resampler = PcmResampler(rate, channels)
        self._chunker = Chunker(rate * chunk_ms // 1000, channels)
        self.produced = 0

    @property
    def overflow_count(self) -> int:
        return 0  # a track has no device buffer to overflow; drops are the bridge's

    def produce(self, bridge: FrameBridge[AudioChunk]) -> None:
        for frame in self._puller.frames(bridge):
            if not isinstance(frame, av.AudioFrame):
                continue
            for pcm in self._chunker.push(self._resampler.frame(frame)):
                pts = self.produced * self._chunker.frames / self._rate
                bridge.put(AudioChunk(pcm, self._rate, self._channels, pts, self.produced))
                self.produced += 1

    def close(self) -> None:
        """Nothing to release: the peer connection belongs to whoever opened it."""


def open_track_video(
    spec: str,
    track: FrameTrack,
    *,
    idle_s: float = IDLE_S,
    first_s: float = FIRST_S,
    max_buffered: int = VIDEO_BUFFER,
    lost: threading.Event | None = None,
) -> TrackVideoInput:
    """The live video input of ``track``. Call on the loop that runs the track; never
    blocks (the thread starts on the first read). ``lost`` is set when the track ends
    or goes quiet (whoever owns the connection can then close it)."""
    loop = asyncio.get_running_loop()
    puller = _TrackPuller(spec, track, loop, idle_s=idle_s, first_s=first_s, lost=lost)
    return TrackVideoInput(spec, puller, max_buffered)


def open_track_audio(
    spec: str,
    track: FrameTrack,
    *,
    rate: int = 16000,
    channels: int = 1,
    chunk_ms: int = 100,
    idle_s: float = IDLE_S,
    first_s: float = FIRST_S,
    lost: threading.Event | None = None,
) -> AudioInput:
    """The live audio input of ``track``: chunks of exactly ``chunk_ms`` at ``rate`` /
    ``channels``. Call on the loop that runs the track; never blocks. Raises
    ``ValueError`` for parameters a microphone would refuse too; ``lost``: as for
    :func:`open_track_video`."""
    if rate <= 0 or chunk_ms <= 0 or (rate * chunk_ms) % 1000:
        raise ValueError(f"{chunk_ms} ms at {rate} Hz is not a whole number of frames")
    channel_layout(channels)  # ValueError outside 1-8
    loop = asyncio.get_running_loop()
    puller = _TrackPuller(spec, track, loop, idle_s=idle_s, first_s=first_s, lost=lost)
    source = TrackAudioSource(puller, rate=rate, channels=channels, chunk_ms=chunk_ms)
    # WebRTC sends Opus at 48 kHz stereo whatever the microphone is.
    info = AudioInfo(
        spec, "device", "webrtc", rate, channels, chunk_ms, rate * chunk_ms // 1000, True,
        48000, 2,
    )  # fmt: skip
    buffered = max(1, round(AUDIO_BUFFER_S * 1000 / chunk_ms))
    return AudioInput(info, source, FrameBridge(buffered, "drop_oldest"))
