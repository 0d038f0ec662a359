"""Capture from a PortAudio device: callback -> bounded ring -> chunks on a thread.

PortAudio calls :meth:`DeviceAudioSource._callback` on its own real-time thread with
each block. The callback only copies the block into a fixed-size :class:`PcmRing`
(never allocating per block, never waiting on the consumer) and counts PortAudio's
``input_overflow`` flags. A producer thread drains the ring, resamples with PyAV and
cuts exact chunks. When the ring is full the oldest audio is overwritten and counted:
a capture device cannot be paused, and an unbounded buffer behind a stalled consumer
would grow without limit.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from devices.audio_chunks import AudioChunk, Chunker, Pcm, PcmResampler
from devices.bridge import FrameBridge
from devices.errors import DeviceLost, UnsupportedMode
from devices.microphones import MicrophoneInfo

RING_SECONDS = 2.0
POLL_S = 0.05  # how often the producer looks for a close while the ring is empty
STALL_TIMEOUT_S = 3.0  # no audio for this long from a running stream: the device is gone
# Before the first block: PortAudio's ALSA path to PulseAudio takes ~1.4 s to deliver it.
STARTUP_TIMEOUT_S = 10.0


# PortAudio's PaErrorCode for settings a device does not offer: paInvalidChannelCount,
# paInvalidSampleRate, paInvalidFlag, paSampleFormatNotSupported, paBadIODeviceCombination.
SETTINGS_REFUSED = frozenset({-9998, -9997, -9995, -9994, -9993})


def refuses_settings(exc: Exception) -> bool:
    """Whether a ``sounddevice.PortAudioError`` says the settings are not offered, rather
    than that the device could not be reached (``paUnanticipatedHostError`` with the host
    API's errno, ``paDeviceUnavailable``, ...). Pure. An error without a code counts as
    refused settings (the cautious answer: it is not retried)."""
    code = exc.args[1] if len(exc.args) > 1 else None
    return not isinstance(code, int) or code in SETTINGS_REFUSED


class PcmRing:
    """A fixed-capacity ring of s16 frames; one writer (callback), one reader. Thread-safe."""

    def __init__(self, capacity: int, channels: int) -> None:
        self._data = np.zeros((capacity, channels), dtype=np.int16)
        self._capacity = capacity
        self._start = 0  # index of the oldest frame
        self._size = 0
        self._cond = threading.Condition()
        self.overruns = 0  # writes that overwrote unread audio
        self.overrun_frames = 0

    def write(self, block: Pcm) -> None:
        """Append ``block``; overwrite (and count) the oldest frames when full. Never waits."""
        frames = int(block.shape[0])
        with self._cond:
            lost = 0
            if frames > self._capacity:  # one block larger than the ring: keep its tail
                lost, block, frames = (
                    frames - self._capacity,
                    block[-self._capacity :],
                    self._capacity,
                )
            excess = self._size + frames - self._capacity
            if excess > 0:
                self._start = (self._start + excess) % self._capacity
                self._size -= excess
                lost += excess
            if lost:
                self.overruns += 1
                self.overrun_frames += lost
            end = (self._start + self._size) % self._capacity
            first = min(frames, self._capacity - end)
            self._data[end : end + first] = block[:first]
            self._data[: frames - first] = block[first:]
            self._size += frames
            self._cond.notify()

    def read(self, timeout: float) -> Pcm:
        """Everything buffered (a copy), waiting up to ``timeout`` s for something."""
        with self._cond:
            if not self._size:
                self._cond.wait(timeout)
            first = min(self._size, self._capacity - self._start)
            out = np.concatenate(
                (
                    self._data[self._start : self._start + first],
                    self._data[: self._size - first],
                )
            )
            self._start = (self._start + self._size) % self._capacity
            self._size = 0
            return out


class DeviceAudioSource:
    """A PortAudio input stream producing :class:`AudioChunk` records."""

    def __init__(
        self, sd: Any, spec: str, mic: MicrophoneInfo, *, rate: int, channels: int, chunk_ms: int
    ) -> None:
        """Open (not start) the stream. Blocks while PortAudio opens the device.

        Raises :class:`UnsupportedMode` when the device refuses the capture settings (see
        :func:`refuses_settings`) and :class:`DeviceLost` when checking or opening fails
        otherwise (e.g. the device just vanished: its PortAudio entry, listed at
        initialisation, is still there, but the host API cannot open it).
        """
        self.spec = spec
        self.mic = mic
        self.device_rate = int(mic.default_samplerate)
        self.device_channels = max(1, min(channels, mic.max_input_channels))
        self._sd = sd
        try:
            sd.check_input_settings(
                device=mic.index,
                channels=self.device_channels,
                dtype="int16",
                samplerate=self.device_rate,
            )
        except (sd.PortAudioError, ValueError) as exc:
            if isinstance(exc, sd.PortAudioError) and not refuses_settings(exc):
                # The device did not answer (it is gone): a loss, retried, not a mode.
                raise DeviceLost(spec, exc) from exc
            raise UnsupportedMode(
                spec,
                f"{self.device_channels} ch at {self.device_rate} Hz ({exc})",
                [f"{mic.max_input_channels} ch, default {mic.default_samplerate:g} Hz"],
            ) from exc
        self.ring = PcmRing(int(self.device_rate * RING_SECONDS), self.device_channels)
        self.overflows = 0  # PortAudio input_overflow flags seen by the callback
        self.produced = 0
        self._finished = threading.Event()
        self._resampler = PcmResampler(rate, channels)
        self._chunker = Chunker(rate * chunk_ms // 1000, channels)
        self._rate = rate
        self._channels = channels
        try:
            self._stream = sd.InputStream(
                device=mic.index,
                channels=self.device_channels,
                samplerate=self.device_rate,
                dtype="int16",
                callback=self._callback,
                finished_callback=self._finished.set,
            )
        except sd.PortAudioError as exc:
            raise DeviceLost(spec, exc) from exc

    @property
    def overflow_count(self) -> int:
        """PortAudio overflows plus ring overruns so far."""
        return self.overflows + self.ring.overruns

    def _callback(self, indata: Pcm, frames: int, time_info: Any, status: Any) -> None:
        # PortAudio's real-time thread: copy and count, nothing else.
        if status.input_overflow:
            self.overflows += 1
        self.ring.write(indata)

    def produce(self, bridge: FrameBridge[AudioChunk]) -> None:
        """Producer thread body: start the stream, cut chunks until closed or lost."""
        try:
            self._stream.start()
        except self._sd.PortAudioError as exc:
            raise DeviceLost(self.spec, exc) from exc
        last_data = time.monotonic()
        allowed_silence = STARTUP_TIMEOUT_S
        while not bridge.closed:
            block = self.ring.read(POLL_S)
            now = time.monotonic()
            if block.shape[0] == 0:
                self._check_alive(now - last_data, allowed_silence)
                continue
            last_data, allowed_silence = now, STALL_TIMEOUT_S
            for pcm in self._chunker.push(self._resampler.pcm(block, self.device_rate)):
                pts = self.produced * self._chunker.frames / self._rate
                bridge.put(
                    AudioChunk(
                        pcm, self._rate, self._channels, pts, self.produced, self.overflow_count
                    )
                )
                self.produced += 1

    def _check_alive(self, silent_for: float, allowed: float) -> None:
        if self._finished.is_set() or not self._stream.active:
            raise DeviceLost(self.spec, RuntimeError("the audio stream stopped"))
        if silent_for > allowed:
            raise DeviceLost(self.spec, TimeoutError(f"no audio for {silent_for:.1f} s"))

    def close(self) -> None:
        """Stop and close the stream (blocks briefly); idempotent."""
        if not self._stream.closed:
            self._stream.abort(ignore_errors=True)
            self._stream.close(ignore_errors=True)
