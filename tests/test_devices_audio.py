"""Microphones: chunking, the ring, WAV, virtual and file sources, a fake PortAudio that
dies, and real capture through PortAudio from a PulseAudio null sink."""

from __future__ import annotations

import io
import shutil
import subprocess
import threading
import time
import wave
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from devices.audio_chunks import AudioChunk, Chunker, encode_wav
from devices.audio_device import DeviceAudioSource, PcmRing
from devices.audio_input import AudioInfo, AudioInput, open_microphone
from devices.bridge import FrameBridge
from devices.errors import AmbiguousDevice, DeviceLost, DeviceNotFound, EndOfStream
from devices.microphones import MicrophoneInfo, list_microphones, resolve_microphone
from tests.pulse import PulseServer
from tests.pulse import pulse_server as pulse_server_fixture  # noqa: F401

RATE = 16000


def dominant_hz(pcm: np.ndarray, rate: int) -> float:
    samples = pcm[:, 0].astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.argmax(spectrum) * rate / len(samples))


def rms(pcm: np.ndarray) -> float:
    return float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2)))


def write_tone(path: Path, *, seconds: float, hz: float = 440.0, rate: int = 44100,
               channels: int = 2, amplitude: float = 0.5) -> Path:  # fmt: skip
    t = np.arange(int(seconds * rate)) / rate
    mono = (np.sin(2 * np.pi * hz * t) * amplitude * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(np.repeat(mono[:, None], channels, axis=1).tobytes())
    return path


async def collect(source: AudioInput, limit: int | None = None) -> list[AudioChunk]:
    chunks: list[AudioChunk] = []
    async with source:
        async for chunk in source:
            chunks.append(chunk)
            if limit is not None and len(chunks) >= limit:
                break
    return chunks


def assert_gap_free(chunks: list[AudioChunk], frames: int, channels: int) -> None:
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert c.pcm.shape == (frames, channels) and c.pcm.dtype == np.int16
        assert c.pts == pytest.approx(c.index * frames / c.rate)


# -- pure parts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("blocks", "chunks", "left"),
    [
        ([3, 3, 3, 3], [0, 1, 0, 1], 2),
        ([10], [2], 0),
        ([4, 1], [0, 1], 0),
        ([0, 2], [0, 0], 2),
    ],
)
def test_chunker_cuts_exact_chunks(blocks: list[int], chunks: list[int], left: int) -> None:
    chunker = Chunker(5, 1)
    counter = iter(range(1000))
    got = []
    for size, expected in zip(blocks, chunks, strict=True):
        block = np.array([[next(counter)] for _ in range(size)], dtype=np.int16).reshape(-1, 1)
        out = chunker.push(block)
        assert len(out) == expected
        got.extend(out)
    flat = np.concatenate(got)[:, 0].tolist() if got else []
    assert flat == list(range(len(flat)))  # order kept, nothing lost or repeated
    tail = chunker.flush()
    assert (tail is None) == (left == 0)
    if tail is not None:
        assert tail.shape == (5, 1) and tail[left:].sum() == 0  # padded with silence


def test_ring_keeps_order_across_wraparound_and_counts_overruns() -> None:
    ring = PcmRing(8, 1)
    ring.write(np.arange(6, dtype=np.int16).reshape(-1, 1))
    assert ring.read(0)[:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    ring.write(np.arange(6, 11, dtype=np.int16).reshape(-1, 1))  # wraps
    assert ring.read(0)[:, 0].tolist() == [6, 7, 8, 9, 10]
    ring.write(np.arange(100, 106, dtype=np.int16).reshape(-1, 1))
    ring.write(np.arange(106, 112, dtype=np.int16).reshape(-1, 1))  # 4 frames overwritten
    assert ring.read(0)[:, 0].tolist() == list(range(104, 112))
    assert (ring.overruns, ring.overrun_frames) == (1, 4)
    ring.write(np.arange(20, dtype=np.int16).reshape(-1, 1))  # bigger than the ring
    assert ring.read(0)[:, 0].tolist() == list(range(12, 20))
    assert (ring.overruns, ring.overrun_frames) == (2, 16)
    assert ring.read(0.01).shape == (0, 1)


def test_encode_wav_round_trips() -> None:
    pcm = (np.arange(3200, dtype=np.int16) - 1600).reshape(-1, 2)
    data = encode_wav(AudioChunk(pcm, 8000, 2, 0.0, 0))
    with wave.open(io.BytesIO(data)) as wav:
        params = (wav.getnchannels(), wav.getsampwidth(), wav.getframerate(), wav.getnframes())
        assert params == (2, 2, 8000, 1600)
        assert np.frombuffer(wav.readframes(1600), "<i2").reshape(-1, 2).tolist() == pcm.tolist()


def _mics() -> list[MicrophoneInfo]:
    return [
        MicrophoneInfo(0, "HDA Intel PCH: ALC3246 Analog (hw:0,0)", "ALSA", 2, 44100.0, False),
        MicrophoneInfo(3, "USB Audio Device: - (hw:1,0)", "ALSA", 1, 48000.0, False),
        MicrophoneInfo(5, "pulse", "ALSA", 32, 44100.0, False),
        MicrophoneInfo(6, "default", "ALSA", 32, 44100.0, True),
    ]


@pytest.mark.parametrize(
    ("spec", "index"),
    [("default", 6), ("3", 3), (3, 3), ("usb audio", 3), ("Pulse", 5), ("alc3246", 0)],
)
def test_resolve_microphone(spec: str | int, index: int) -> None:
    assert resolve_microphone(spec, _mics()).index == index


def test_resolve_microphone_errors_list_candidates() -> None:
    with pytest.raises(AmbiguousDevice) as ambiguous:
        resolve_microphone("hw:", _mics())
    assert "0: HDA Intel" in str(ambiguous.value) and "3: USB Audio" in str(ambiguous.value)
    assert "pulse" not in str(ambiguous.value)
    with pytest.raises(DeviceNotFound) as missing:
        resolve_microphone("Blue Yeti", _mics())
    assert "6: default (ALSA, 32 ch)" in str(missing.value)
    with pytest.raises(DeviceNotFound, match="no input device with that index"):
        resolve_microphone("9", _mics())
    with pytest.raises(DeviceNotFound, match="no default input device"):
        resolve_microphone("default", _mics()[:2])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rate": 0}, "rate must be positive"),
        ({"channels": 9}, "channels must be 1-8"),
        ({"chunk_ms": 0}, "chunk_ms must be positive"),
        ({"rate": 44100, "chunk_ms": 15}, "not a whole number of frames"),
    ],
)
def test_open_microphone_refuses_bad_parameters(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        open_microphone("lavfi:sine", **kwargs)


# -- virtual and file sources -------------------------------------------------------------


async def test_virtual_tone_yields_exact_gap_free_chunks() -> None:
    source = open_microphone(
        "lavfi:sine=frequency=440:sample_rate=44100:duration=1",
        rate=RATE,
        channels=1,
        chunk_ms=100,
        realtime=False,
    )
    assert (source.info.source_rate, source.info.chunk_frames) == (44100, 1600)
    chunks = await collect(source)
    assert len(chunks) == 10
    assert_gap_free(chunks, 1600, 1)
    pcm = np.concatenate([c.pcm for c in chunks])
    assert dominant_hz(pcm, RATE) == pytest.approx(440, abs=2)


async def test_file_is_resampled_to_stereo_and_ends(tmp_path: Path) -> None:
    wav = write_tone(tmp_path / "tone.wav", seconds=0.55, rate=22050, channels=1)
    source = open_microphone(f"file:{wav}", rate=48000, channels=2, chunk_ms=20, realtime=False)
    chunks = []
    async with source:
        with pytest.raises(EndOfStream):
            while True:
                chunks.append(await source.read())
    assert len(chunks) == 28  # 27.5 chunks of audio, the last padded with silence
    assert_gap_free(chunks, 960, 2)
    assert np.array_equal(chunks[5].pcm[:, 0], chunks[5].pcm[:, 1])
    assert rms(chunks[-1].pcm[480:]) == 0.0
    assert source.statistics().produced == 28


async def test_file_pacing_on_and_off(tmp_path: Path) -> None:
    wav = write_tone(tmp_path / "tone.wav", seconds=1.0)
    started = time.monotonic()
    fast = await collect(open_microphone(str(wav), rate=RATE, chunk_ms=100, realtime=False))
    fast_s = time.monotonic() - started
    started = time.monotonic()
    paced = await collect(open_microphone(f"file:{wav}", rate=RATE, chunk_ms=100))
    paced_s = time.monotonic() - started
    assert len(fast) == len(paced) == 10
    assert paced_s >= 0.7 * 1.0 and fast_s < paced_s / 2


async def test_close_stops_an_endless_virtual_source() -> None:
    source = open_microphone("lavfi:sine=frequency=300:sample_rate=8000", rate=8000, chunk_ms=50)
    chunks = await collect(source, limit=3)
    assert [c.index for c in chunks] == [0, 1, 2] and not source.running


def test_missing_file_is_device_not_found(tmp_path: Path) -> None:
    with pytest.raises(DeviceNotFound, match="no such file"):
        open_microphone(f"file:{tmp_path / 'nope.wav'}")


# -- a fake PortAudio: overflows, then the device vanishes ---------------------------------


class FakeSounddevice:
    """Enough of ``sounddevice`` for DeviceAudioSource: a stream that delivers N blocks."""

    class PortAudioError(Exception):
        pass

    def __init__(self, blocks: int, overflow_at: int) -> None:
        self.blocks = blocks
        self.overflow_at = overflow_at

    def check_input_settings(self, **kwargs: Any) -> None:
        return None

    def InputStream(self, **kwargs: Any) -> Any:  # the name sounddevice uses
        fake = self

        class Stream:
            active = False
            closed = False

            def start(self) -> None:
                self.active = True
                threading.Thread(target=self._run, daemon=True).start()

            def _run(self) -> None:
                rate, channels = kwargs["samplerate"], kwargs["channels"]
                t = np.arange(rate // 100)
                for n in range(fake.blocks):
                    tone = np.sin(2 * np.pi * 440 * (t + n * len(t)) / rate) * 8000
                    block = np.repeat(tone.astype(np.int16)[:, None], channels, axis=1)
                    status = SimpleNamespace(input_overflow=n == fake.overflow_at)
                    kwargs["callback"](block, len(t), None, status)
                    time.sleep(0.002)
                self.active = False  # the USB device was pulled
                kwargs["finished_callback"]()

            def abort(self, ignore_errors: bool = True) -> None:
                self.active = False

            def close(self, ignore_errors: bool = True) -> None:
                self.closed = True

        return Stream()


async def test_vanishing_device_raises_device_lost_after_its_chunks() -> None:
    mic = MicrophoneInfo(2, "Fake USB Mic", "ALSA", 2, 48000.0, False)
    fake = FakeSounddevice(blocks=50, overflow_at=12)  # 50 x 10 ms = 0.5 s
    device = DeviceAudioSource(fake, "Fake USB Mic", mic, rate=RATE, channels=1, chunk_ms=100)
    assert (device.device_rate, device.device_channels) == (48000, 1)
    info = AudioInfo("Fake USB Mic", "device", mic.name, RATE, 1, 100, 1600, True, 48000, 1)
    source = AudioInput(info, device, FrameBridge(50, "drop_oldest"))
    chunks: list[AudioChunk] = []
    with pytest.raises(DeviceLost) as caught:
        async with source:
            while True:
                chunks.append(await source.read())
    assert caught.value.spec == "Fake USB Mic"
    assert len(chunks) == 4  # 0.5 s minus the resampler's delay: four whole chunks
    assert_gap_free(chunks, 1600, 1)
    assert chunks[0].overflow_count == 0 and chunks[-1].overflow_count == 1
    assert dominant_hz(np.concatenate([c.pcm for c in chunks]), RATE) == pytest.approx(440, abs=3)


# -- real PortAudio on a PulseAudio null sink ---------------------------------------------


def test_portaudio_lists_the_pulse_devices(pulse_server: PulseServer) -> None:
    mics = list_microphones(rescan=True)
    names = [m.name for m in mics]
    assert "pulse" in names and "default" in names, names
    (default,) = [m for m in mics if m.is_default]
    assert default.name == "default" and default.max_input_channels >= 1
    assert default.default_samplerate > 0 and default.host_api == "ALSA"


def test_unknown_microphone_lists_the_real_ones(pulse_server: PulseServer) -> None:
    with pytest.raises(DeviceNotFound) as caught:
        open_microphone("Blue Yeti", rate=RATE)
    assert ": pulse (ALSA" in str(caught.value) and ": default (ALSA" in str(caught.value)
    with pytest.raises(AmbiguousDevice):
        open_microphone("u", rate=RATE)  # both "pulse" and "default"


async def test_real_capture_hears_a_tone_played_into_the_sink(
    pulse_server: PulseServer, tmp_path: Path
) -> None:
    if shutil.which("paplay") is None:
        pytest.skip("paplay is not installed (apt-get install pulseaudio-utils)")
    tone = write_tone(tmp_path / "tone.wav", seconds=1.5, rate=48000)
    source = open_microphone("default", rate=RATE, channels=1, chunk_ms=100)
    assert source.info.is_live and source.info.kind == "device"
    chunks: list[AudioChunk] = []
    async with source:
        chunks.append(await source.read())  # the stream runs: start the tone now
        player = pulse_server.play(tone)
        try:
            while len(chunks) < 24:
                chunks.append(await source.read())
        finally:
            _, stderr = player.communicate(timeout=10)
        assert player.returncode == 0, stderr
        assert source.statistics().bridge.dropped == 0
    assert_gap_free(chunks, 1600, 1)
    loud = [c for c in chunks if rms(c.pcm) > 1000]
    assert len(loud) >= 10, [round(rms(c.pcm)) for c in chunks]
    assert dominant_hz(np.concatenate([c.pcm for c in loud]), RATE) == pytest.approx(440, abs=5)


async def test_espeak_speech_file_decodes_to_whole_chunks(tmp_path: Path) -> None:
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        pytest.skip("espeak-ng and sox are not installed")
    raw, reference = tmp_path / "raw.wav", tmp_path / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), "turn on the light"], check=True, timeout=30)
    subprocess.run(
        ["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer",
         str(reference)],
        check=True,
        timeout=30,
    )  # fmt: skip
    with wave.open(str(reference)) as ref:
        expected_frames = ref.getnframes()
    # espeak-ng writes 22050 Hz: the source resamples it to 16 kHz itself.
    source = open_microphone(f"file:{raw}", rate=RATE, channels=1, chunk_ms=20, realtime=False)
    assert source.info.source_rate == 22050
    chunks = await collect(source)
    assert_gap_free(chunks, 320, 1)
    # Every sample, rounded up to a whole chunk (resamplers may differ by a sample).
    assert abs(len(chunks) - -(-expected_frames // 320)) <= 1
    assert rms(np.concatenate([c.pcm for c in chunks])) > 500


async def test_a_paced_chunk_arrives_once_its_last_sample_is_due(tmp_path: Path) -> None:
    # As from a device: the connector dates a chunk's start a chunk's length before it
    # arrives, so a paced file must not hand it over earlier (its sound would lead).
    wav = write_tone(tmp_path / "tone.wav", seconds=1.0)
    source = open_microphone(f"file:{wav}", rate=RATE, chunk_ms=200)
    started = time.monotonic()
    arrived: list[float] = []
    async with source:
        async for chunk in source:
            arrived.append(time.monotonic() - started)
            assert chunk.pts == pytest.approx(0.2 * len(arrived) - 0.2)
    assert len(arrived) == 5
    # Sleeping never ends early: each is at least its end's time after the start.
    assert all(at >= 0.2 * (index + 1) - 0.01 for index, at in enumerate(arrived)), arrived
