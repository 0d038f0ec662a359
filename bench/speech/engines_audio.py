"""The audio :mod:`bench.speech.engines` plays: pocketsphinx's librivox recordings.

Read speech (:mod:`tests.speech_corpus`, downloaded once with the installed
pocketsphinx's sdist), 16 kHz mono s16, with quiet room noise
(:func:`tests.speech_corpus.gap`) between recordings:

* the WER stream: the recordings joined with 1 s gaps (``join``), their
  reference texts in order;
* the talk stream for the real-time ladder: each recording followed by as much
  room noise as it lasts (50 % talk), after a lead-in of room noise that differs
  from stream to stream so that K streams do not all talk at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.speech.audio import pcm_wav

RATE = 16000
QUICK_RECORDINGS = ("sense_and_sensibility_01_austen_64kb-0880",)  # 3 s, for the tests


@dataclass(frozen=True)
class Speech:
    """Recordings to play: names, PCM and what was said."""

    names: tuple[str, ...]
    pcms: tuple[bytes, ...]
    references: tuple[str, ...]

    @property
    def speech_s(self) -> float:
        return sum(len(pcm) for pcm in self.pcms) / 2 / RATE


def load_speech(quick: bool) -> Speech:
    """The librivox recordings (all five; one short one when ``quick``)."""
    from tests.speech_corpus import load_corpus

    recordings = [r for r in load_corpus().librivox if not quick or r.name in QUICK_RECORDINGS]
    return Speech(
        tuple(r.name for r in recordings),
        tuple(r.pcm for r in recordings),
        tuple(r.reference for r in recordings),
    )


def wer_stream(speech: Speech) -> bytes:
    """The recordings joined with 1 s of room noise before, between and after."""
    from tests.speech_corpus import gap

    parts = [gap(1.0, seed=0)]
    for index, pcm in enumerate(speech.pcms, start=1):
        parts += [pcm, gap(1.0, seed=index)]
    return b"".join(parts)


def talk_stream(speech: Speech, lead_s: float, seed: int, *, talk: float = 0.5) -> bytes:
    """``lead_s`` of room noise, then each recording followed by enough noise that
    ``talk`` of the rest is speech (at least 1 s: the last utterance needs silence
    after it to end)."""
    from tests.speech_corpus import gap

    parts = [gap(lead_s, seed=seed * 100)] if lead_s > 0 else []
    for index, pcm in enumerate(speech.pcms, start=1):
        quiet_s = max(1.0, len(pcm) / 2 / RATE * (1 - talk) / talk)
        parts += [pcm, gap(quiet_s, seed=seed * 100 + index)]
    return b"".join(parts)


def talk_period_s(speech: Speech) -> float:
    """One recording and its gap, on average: how far apart stream lead-ins are spread."""
    return 2 * speech.speech_s / len(speech.pcms)


def write_wav(path: Path, pcm: bytes) -> Path:
    path.write_bytes(pcm_wav(pcm, RATE))
    return path
