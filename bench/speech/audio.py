"""The audio the speech benches decode (:mod:`bench.speech`, :mod:`bench.speech.whole`):
espeak-ng (``-v en-us``, converted by sox) speaking the sample grammar's sentences,
16 kHz mono 16-bit, and that audio cut into WAV chunks as a microphone connector
sends it.

Needs ``espeak-ng`` and ``sox`` on the PATH.
"""

from __future__ import annotations

import io
import subprocess
import wave
from pathlib import Path

from bench._lib.common import REPO_ROOT

GRAMMAR = REPO_ROOT / "samples" / "grammar" / "commands.gram"
SENTENCES = [
    "turn on the lights", "start recording", "what time is it", "open the door",
    "stop recording", "close the door", "turn off the lights",
]  # fmt: skip
RATE = 16000


def speak(text: str, base: Path) -> bytes:
    """``text`` spoken by espeak-ng (``-v en-us``) as 16 kHz mono s16 PCM; writes
    ``base.raw.wav`` and ``base.wav`` on the way."""
    raw, out = base.with_suffix(".raw.wav"), base.with_suffix(".wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(raw), text], check=True)
    subprocess.run(
        ["sox", str(raw), "-r", str(RATE), "-c", "1", "-b", "16", "-e", "signed-integer",
         str(out)], check=True,
    )  # fmt: skip
    with wave.open(str(out), "rb") as wav:
        return wav.readframes(wav.getnframes())


def make_audio(path: Path, seconds: float) -> Path:
    """Sentences (with 0.6 s silences) repeated to at least ``seconds``; a 16 kHz WAV."""
    pieces: list[bytes] = []
    silence = bytes(2 * round(0.6 * RATE))
    for index, text in enumerate(SENTENCES):
        pieces += [silence, speak(text, path.with_suffix(f".{index}"))]
    once = b"".join(pieces) + silence
    pcm = once * max(1, int(seconds * RATE * 2 / len(once)) + 1)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(pcm[: int(seconds * RATE) * 2])
    return path


def pcm_wav(pcm: bytes, rate: int = RATE) -> bytes:
    """A complete mono 16-bit WAV file of ``pcm``, as a microphone chunk is."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as chunk:
        chunk.setnchannels(1)
        chunk.setsampwidth(2)
        chunk.setframerate(rate)
        chunk.writeframes(pcm)
    return buffer.getvalue()


def wav_chunks(path: Path, chunk_ms: int) -> list[bytes]:
    with wave.open(str(path), "rb") as wav:
        pcm = wav.readframes(wav.getnframes())
    step = RATE * chunk_ms // 1000 * 2
    return [pcm_wav(pcm[at : at + step]) for at in range(0, len(pcm), step)]
