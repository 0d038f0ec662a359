"""Open a microphone, an audio file or a virtual tone, and read exact chunks from asyncio.

Spec forms: ``"default"``, a PortAudio index (``"3"`` or ``3``), a device name (a
case-insensitive substring; an ambiguous one is refused with the matches listed),
``file:x.wav`` (anything PyAV decodes; a bare existing path with a directory part works
too) and ``lavfi:sine=frequency=440:sample_rate=16000`` (virtual).

Every source yields :class:`~devices.audio_chunks.AudioChunk` records of exactly
``chunk_ms`` of s16 PCM at ``rate`` / ``channels`` (resampled with PyAV). Real devices
capture through a sounddevice callback into a bounded ring (see
:mod:`devices.audio_device`) and drop the oldest chunk when the consumer is slow;
files and lavfi decode on a thread, block instead (lossless) and are paced to real time
unless ``realtime=False``, each chunk released when its last sample is due, as a device
would deliver it. The last chunk of a file is padded with silence to full
length. A device that stops delivering raises :class:`~devices.errors.DeviceLost`; a
file that is done raises :class:`~devices.errors.EndOfStream`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, Protocol

import av
import numpy as np

from devices.audio_chunks import AudioChunk, Chunker, Pcm, PcmResampler, channel_layout
from devices.audio_device import DeviceAudioSource
from devices.bridge import BridgeStatistics, FrameBridge
from devices.errors import DeviceNotFound
from devices.microphones import list_microphones, load_sounddevice, resolve_microphone
from devices.pacing import Pacer
from devices.threaded import ThreadedInput

AudioKind = Literal["device", "file", "lavfi"]


@dataclass(frozen=True)
class AudioInfo:
    """What was opened and what it will yield."""

    spec: str
    kind: AudioKind
    name: str
    rate: int
    channels: int
    chunk_ms: int
    chunk_frames: int
    is_live: bool
    source_rate: int
    source_channels: int


@dataclass(frozen=True)
class AudioStatistics:
    """Chunks produced, device overflows (PortAudio + ring), bridge state."""

    produced: int
    overflow_count: int
    bridge: BridgeStatistics


class _AudioSource(Protocol):
    produced: int

    @property
    def overflow_count(self) -> int: ...

    def produce(self, bridge: FrameBridge[AudioChunk]) -> None: ...

    def close(self) -> None: ...


class AudioInput(ThreadedInput[AudioChunk]):
    """Audio chunks from a producer thread; consume with ``async for`` or ``read``."""

    def __init__(
        self, info: AudioInfo, source: _AudioSource, bridge: FrameBridge[AudioChunk]
    ) -> None:
        super().__init__(info.spec, bridge)
        self.info = info
        self._source = source

    def _produce(self, bridge: FrameBridge[AudioChunk]) -> None:
        try:
            self._source.produce(bridge)
        finally:
            self._source.close()

    def _release(self) -> None:
        self._source.close()

    def statistics(self) -> AudioStatistics:
        """Counters; never blocks."""
        return AudioStatistics(
            self._source.produced, self._source.overflow_count, self._bridge.statistics()
        )


def open_microphone(
    spec: str | int,
    *,
    rate: int = 16000,
    channels: int = 1,
    chunk_ms: int = 100,
    realtime: bool | None = None,
    max_buffered: int | None = None,
    start_s: float = 0.0,
) -> AudioInput:
    """Open ``spec``; capture or decoding starts on the first read.

    A file or lavfi source starts ``start_s`` seconds in, sample-accurately: its first
    chunk has pts ``start_s`` (a device ignores it).

    Blocks while the source opens (PortAudio device scan and open, file probe): from
    async code call it through ``asyncio.to_thread``. ``realtime`` (files and lavfi;
    default True) paces chunks to the wall clock; devices ignore it.

    Raises ``ValueError`` for bad parameters (``rate * chunk_ms`` must be a whole number
    of frames per 1000), :class:`DeviceNotFound` / :class:`AmbiguousDevice` listing the
    microphones, :class:`PortAudioMissing`, :class:`UnsupportedMode` when the device
    refuses the settings, :class:`DeviceLost` when it fails to open, and FFmpeg's errors
    for an undecodable file.
    """
    text = str(spec).strip()
    _check_params(rate, channels, chunk_ms)
    chunk_frames = rate * chunk_ms // 1000
    # Live: ~5 s of chunks before the oldest is dropped; decoded: a few (it blocks).
    live_buffer = max_buffered if max_buffered is not None else max(1, 5000 // chunk_ms)
    file_buffer = max_buffered if max_buffered is not None else 8
    kind, target = _split(text)
    if kind == "device":
        microphones = list_microphones()
        mic = resolve_microphone(target, microphones)
        device = DeviceAudioSource(
            load_sounddevice(), text, mic, rate=rate, channels=channels, chunk_ms=chunk_ms
        )
        info = AudioInfo(
            text, kind, mic.name, rate, channels, chunk_ms, chunk_frames, True,
            device.device_rate, device.device_channels,
        )  # fmt: skip
        return AudioInput(info, device, FrameBridge(live_buffer, "drop_oldest"))
    decoded = DecodedAudioSource(
        text,
        target,
        "lavfi" if kind == "lavfi" else None,
        rate=rate,
        channels=channels,
        chunk_ms=chunk_ms,
        realtime=True if realtime is None else realtime,
        start_s=start_s,
    )
    info = AudioInfo(
        text, kind, target, rate, channels, chunk_ms, chunk_frames, False,
        decoded.source_rate, decoded.source_channels,
    )  # fmt: skip
    return AudioInput(info, decoded, FrameBridge(file_buffer, "block"))


def _check_params(rate: int, channels: int, chunk_ms: int) -> None:
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    channel_layout(channels)  # raises ValueError outside 1-8
    if chunk_ms <= 0:
        raise ValueError(f"chunk_ms must be positive, got {chunk_ms}")
    if (rate * chunk_ms) % 1000:
        raise ValueError(f"{chunk_ms} ms at {rate} Hz is not a whole number of frames")


def _split(text: str) -> tuple[AudioKind, str]:
    if text.startswith("file:"):
        path = text[len("file:") :]
        if not os.path.isfile(path):
            raise DeviceNotFound(text, [], reason="no such file")
        return "file", path
    if text.startswith("lavfi:"):
        return "lavfi", text[len("lavfi:") :]
    if os.sep in text and os.path.isfile(text):
        return "file", text
    if not text:
        raise ValueError("empty microphone spec")
    return "device", text


class DecodedAudioSource:
    """A file, lavfi graph or stream URL decoded, resampled and chunked on the producer
    thread."""

    def __init__(
        self,
        spec: str,
        url: str,
        format: str | None,
        *,
        rate: int,
        channels: int,
        chunk_ms: int,
        realtime: bool,
        options: dict[str, str] | None = None,
        timeout: float | tuple[float, float] | None = None,
        start_s: float = 0.0,
    ) -> None:
        """Open the container (blocks while FFmpeg probes it), positioned ``start_s``
        seconds after the stream's start (see :meth:`produce`). ``options`` are FFmpeg's
        input options and ``timeout`` is ``av.open``'s (seconds: one value, or (open,
        read)); give a stream URL both (:func:`~devices.video_spec.url_options`,
        :func:`~devices.video_spec.url_timeout`), or a silent server blocks the open,
        and later a read, forever. Raises FFmpeg's errors (``av.FFmpegError``, an
        ``OSError`` for system errors; a timeout is one), :class:`DeviceNotFound` when
        there is no audio stream."""
        self.spec = spec
        self._container = av.open(url, format=format, options=options, timeout=timeout)
        if not self._container.streams.audio:
            self._container.close()
            raise DeviceNotFound(spec, [], reason="it has no audio stream")
        self._stream = self._container.streams.audio[0]
        self.source_rate = int(self._stream.codec_context.sample_rate)
        self.source_channels = int(self._stream.codec_context.channels)
        self._rate = rate
        self._channels = channels
        self._realtime = realtime
        self._resampler = PcmResampler(rate, channels)
        self._chunker = Chunker(rate * chunk_ms // 1000, channels)
        self._start_frame = round(start_s * rate)  # output frames before the first chunk
        self._position: int | None = None  # output frame of the next resampled sample
        if self._start_frame > 0:
            # In microseconds (av.time_base): seeks the file to a packet at or before it.
            target = self._origin_s() + start_s
            self._container.seek(int(target * av.time_base), backward=True)
        self.produced = 0
        self.overflow_count = 0  # a file never overflows

    def produce(self, bridge: FrameBridge[AudioChunk]) -> None:
        """Thread body: decode to the end (EndOfStream follows), pacing if realtime.
        Samples before ``start_s`` (the seek lands on a packet at or before it) are
        dropped, so the first chunk starts exactly there."""
        pacer = Pacer(bridge.wait_closed) if self._realtime else None
        for packet in self._container.demux(self._stream):
            for frame in packet.decode():
                if isinstance(frame, av.AudioFrame):
                    pcm = self._from_start(frame, self._resampler.frame(frame))
                    self._emit(bridge, pacer, self._chunker.push(pcm))
        self._emit(
            bridge, pacer, self._chunker.push(self._from_start(None, self._resampler.frame(None)))
        )
        last = self._chunker.flush()
        if last is not None:
            self._emit(bridge, pacer, [last])

    def _emit(
        self, bridge: FrameBridge[AudioChunk], pacer: Pacer | None, blocks: list[Pcm]
    ) -> None:
        for pcm in blocks:
            pts = (self._start_frame + self.produced * self._chunker.frames) / self._rate
            if pacer is not None:
                # Released once its last sample is due, as a device delivers a chunk (the
                # microphone dates a chunk's start a chunk's length before it arrives):
                # released at its start, sound stood that much ahead of the picture.
                if self.produced == 0:
                    pacer.wait_until(pts)  # the clock starts at the first sample
                pacer.wait_until(pts + pcm.shape[0] / self._rate)
            bridge.put(AudioChunk(pcm, self._rate, self._channels, pts, self.produced, 0))
            self.produced += 1

    def _from_start(self, frame: av.AudioFrame | None, pcm: Pcm) -> Pcm:
        """``pcm`` (resampled from ``frame``) without the samples before ``start_s``.

        The first decoded frame's time places the resampled output on the stream's
        timeline (it is contiguous from there on). A seek that landed past ``start_s``
        (it should not: it seeks backward) is filled with silence, keeping pts true.
        """
        if self._start_frame == 0:
            return pcm  # not resumed: every sample, as decoded
        if self._position is None:
            if frame is None:
                return pcm
            placed = self._start_frame  # no time: trust the seek
            if frame.time is not None:
                placed = round((frame.time - self._origin_s()) * self._rate)
            if placed > self._start_frame:
                silence = np.zeros((placed - self._start_frame, pcm.shape[1]), dtype=np.int16)
                pcm, placed = np.concatenate([silence, pcm]), self._start_frame
            self._position = placed
        position, self._position = self._position, self._position + pcm.shape[0]
        skip = self._start_frame - position
        return pcm if skip <= 0 else pcm[skip:]

    def _origin_s(self) -> float:
        """Stream time of its first sample: a fresh run's pts 0."""
        start, base = self._stream.start_time, self._stream.time_base
        return float(start * base) if start is not None and base is not None else 0.0

    def close(self) -> None:
        """Release the container; idempotent."""
        self._container.close()
