"""One stream's way from WAV chunks to transcripts on the stream's clock.

:class:`SpeechStream` is the speech node's core without the node: it reads each
chunk, fills holes and handles rewinds (see :mod:`mediaflow.nodes.speech`),
resamples to 16 kHz mono, feeds the recogniser and maps its times to the
stream's clock. It blocks (decoding is CPU-bound); call it from one thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from mediaflow.nodes.recognizer import Recognizer, Result
from mediaflow.nodes.speech_audio import (
    Continuity,
    MonoResampler,
    StreamClock,
    continuity,
    read_wav,
)
from mediaflow.nodes.whole_utterance import SAMPLE_RATE

MAX_HOLE_FILL_S: Final = 1.0
"""Silence put in a hole, at most: enough for the endpointer to end an utterance."""


@dataclass(frozen=True, slots=True)
class Transcript:
    """A result on the stream's clock, ready to emit."""

    text: str
    start: float
    end: float
    final: bool
    confidence: float | None = None


class SpeechStream:
    """One stream's way from WAV chunks to transcripts. Blocks; call from one thread."""

    def __init__(self, recognizer: Recognizer, *, partials: bool = True) -> None:
        self.recognizer = recognizer
        self.partials = partials
        self.clock = StreamClock()
        self._resampler = MonoResampler()
        self._last_partial: str | None = None

    def push(self, wav: bytes, pts: float | None) -> list[Transcript]:
        """Hear one chunk starting at stream time ``pts`` (None: right after the last).

        Raises :class:`AudioFormatError` before anything changes if ``wav`` cannot be
        read; re-raises a recogniser failure after resetting it.
        """
        chunk = read_wav(wav)
        out: list[Transcript] = []
        match continuity(self.clock.expected, pts):
            case Continuity.FIRST | Continuity.FOLLOWS:
                pass
            case Continuity.GAP:
                assert pts is not None and self.clock.expected is not None
                hole = min(pts - self.clock.expected, MAX_HOLE_FILL_S)
                silence = bytes(2 * round(hole * SAMPLE_RATE))
                out += self._feed(silence, self.clock.expected, hole)
            case Continuity.REWIND:
                out += self._map(self.recognizer.flush())
                self.clock.restart()
        return out + self._feed(self._resampler.convert(chunk), pts, chunk.duration)

    def flush(self) -> list[Transcript]:
        """Finish the utterance in progress (the stream ended)."""
        out = self._map(self.recognizer.flush())
        self.clock.restart()
        return out

    def _feed(self, pcm: bytes, pts: float | None, duration: float) -> list[Transcript]:
        expected = self.clock.expected
        self.clock.add(pts, len(pcm) // 2, duration)
        try:
            results = self.recognizer.feed(pcm)
        except Exception:
            # Its state is unknown now: start clean, and let a retry feed this again.
            self.recognizer.reset()
            self.clock.restart()
            self.clock.expected = expected
            self._last_partial = None
            raise
        return self._map(results)

    def _map(self, results: list[Result]) -> list[Transcript]:
        out: list[Transcript] = []
        for result in results:
            if not result.final and (not self.partials or result.text == self._last_partial):
                continue
            start = round(self.clock.to_stream(result.start), 3)
            end = round(self.clock.to_stream(result.end), 3)
            out.append(Transcript(result.text, start, end, result.final, result.confidence))
            self._last_partial = None if result.final else result.text
            if result.final:
                self.clock.forget_before(result.end)
        return out
