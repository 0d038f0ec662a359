"""WAV chunks written and read without the ``wave`` module on the common path: the
same bytes as it writes, the same audio and the same refusals when read."""

from __future__ import annotations

import io
import struct
import wave

import pytest

from devices.audio_chunks import pcm_wav
from mediaflow.nodes.speech_audio import AudioFormatError, canonical_wav, read_wav


def wave_module_wav(pcm: bytes, rate: int, channels: int) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)
    return buffer.getvalue()


FORMATS = [(16000, 1), (8000, 1), (44100, 2), (48000, 2), (48000, 6), (16000, 8)]


@pytest.mark.parametrize(("rate", "channels"), FORMATS)
@pytest.mark.parametrize("frames", [0, 1, 1600, 4800])
def test_pcm_wav_writes_what_the_wave_module_writes(rate: int, channels: int, frames: int) -> None:
    pcm = bytes(range(256)) * (frames * 2 * channels // 256) + bytes(frames * 2 * channels % 256)
    assert pcm_wav(pcm, rate, channels) == wave_module_wav(pcm, rate, channels)


@pytest.mark.parametrize(("rate", "channels"), FORMATS)
def test_a_canonical_chunk_reads_as_the_wave_module_reads_it(rate: int, channels: int) -> None:
    pcm = bytes(range(200)) * 6 * channels
    data = pcm_wav(pcm, rate, channels)
    chunk = canonical_wav(data)
    assert chunk is not None
    assert (chunk.pcm, chunk.rate, chunk.channels) == (pcm, rate, channels)
    assert read_wav(data) == chunk


def with_list_chunk(data: bytes) -> bytes:
    """The same WAV with a LIST chunk before "data" (as many editors write)."""
    extra = b"LIST" + struct.pack("<I", 4) + b"INFO"
    body = data[12:36] + extra + data[36:]
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


def eight_bit(data: bytes) -> bytes:
    return data[:32] + struct.pack("<HH", 1, 8) + data[36:]


@pytest.mark.parametrize(
    ("make", "canonical"),
    [(with_list_chunk, False), (eight_bit, False), (lambda d: d, True)],
    ids=["list-chunk", "8-bit", "plain"],
)
def test_other_layouts_go_to_the_wave_module(make: object, canonical: bool) -> None:
    data = make(pcm_wav(b"\x01\x00" * 160, 16000, 1))  # type: ignore[operator]
    assert (canonical_wav(data) is not None) is canonical
    if make is eight_bit:
        with pytest.raises(AudioFormatError, match="16-bit"):
            read_wav(data)
    else:
        assert read_wav(data).pcm == b"\x01\x00" * 160


@pytest.mark.parametrize("cut", [1, 2, 100])
def test_a_truncated_canonical_chunk_is_refused_as_before(cut: int) -> None:
    data = pcm_wav(b"\x01\x00" * 160, 16000, 1)[:-cut]
    with pytest.raises(AudioFormatError, match="truncated: the header announces 160 frames"):
        read_wav(data)
