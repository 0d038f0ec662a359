"""``engine = "whisper"``: faster-whisper (CTranslate2) behind Silero voice detection.

A :class:`WhisperRecognizer` is a :class:`~mediaflow.nodes.recognizer.Recognizer`:
16 kHz mono in, pieces of any size. Silero scores each 32 ms window
(:mod:`mediaflow.nodes.voice_activity`) and :class:`UtteranceFinder` turns the
scores into utterances. The recogniser keeps the stream's recent audio, so
each final is Whisper decoding that utterance whole, padded with ``pad_s`` of
what came before and after it: the same settings faster-whisper uses on a whole
file (beam search of 5, temperature fallback), so a final is what the
utterance's own recording gives. Nothing but detected speech ever reaches the
model: silence, noise, music and tones produce no text, and the model's own
rule (a segment with ``no_speech_prob`` above 0.6 and a mean log-probability
under -1) drops what a cough or a door makes of it.

Partials re-decode the growing utterance greedily (beam 1, no fallback, no
timestamps) at most every ``partial_every_s`` of audio, and never more often
than four times the last partial's own decoding time in audio: on a slow
machine they thin out instead of piling up. Finals are never skipped: a node
that cannot keep up falls behind on its queue, where the backlog shows.

The model is loaded once per process (:func:`shared_model`) and shared by every
stream in it: in the speech host processes (``isolate = "process"``, the default),
each host holds one copy whatever the number of nodes it serves.
CTranslate2 releases the GIL while it decodes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from mediaflow.nodes.recognizer import RecognizerError, Result
from mediaflow.nodes.voice_activity import (
    SileroVad,
    Utterance,
    UtteranceFinder,
    VadUnavailable,
    VoiceSettings,
)
from mediaflow.nodes.whisper_models import DEFAULT_MODEL, resolve_model
from mediaflow.nodes.whole_utterance import SAMPLE_RATE

COMPUTE_TYPES: Final = ("int8", "int8_float32", "float32", "default")
NO_SPEECH: Final = 0.8
"""A segment the model calls silence with more than this probability is dropped,
whatever its words' probability: on pink noise tiny.en says "You" at 0.93-0.96
(log-probability -0.9, which Whisper's own rule lets through); on speech, the
corpus's highest is 0.42 ("five five")."""
PARTIAL_COST_FACTOR: Final = 4.0
"""A partial waits for at least this many times its predecessor's decoding time."""


@dataclass(frozen=True)
class WhisperSettings:
    """A Whisper recogniser's settings; a plain value that pickles (a recipe).

    ``model``: a name or a directory (:mod:`mediaflow.nodes.whisper_models`).
    ``language``: ``None`` lets a multilingual model detect it (English-only
    models need none). ``threads``: CTranslate2's threads per decode; 0
    (automatic): the speech node's share of the cores (its host pool's
    :attr:`~mediaflow.nodes.speech_host.HostPool.threads_per_process`), one
    for a recogniser built outside a node (:attr:`cpu_threads`).
    """

    model: str = DEFAULT_MODEL
    flow_dir: Path | None = None
    download: bool = False
    language: str | None = None
    beam_size: int = 5
    compute_type: str = "int8"
    threads: int = 0
    partials: bool = True
    partial_every_s: float = 1.5
    voice: VoiceSettings = field(default_factory=VoiceSettings)

    def __post_init__(self) -> None:
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(
                f"compute_type must be one of {COMPUTE_TYPES}; got {self.compute_type!r}"
            )
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be at least 1; got {self.beam_size!r}")
        if self.threads < 0:
            raise ValueError(f"threads must be 0 (automatic) or more; got {self.threads!r}")
        if not self.partial_every_s > 0:
            raise ValueError(f"partial_every_s must be positive; got {self.partial_every_s!r}")

    @property
    def cpu_threads(self) -> int:
        """The threads the model decodes with: ``threads``, or one for 0."""
        return self.threads or 1

    def build(self) -> WhisperRecognizer:
        """Load (or share) the model and the voice detector. Raises
        :class:`RecognizerError` (:class:`ModelNotFound` for a missing model)."""
        return WhisperRecognizer(self)


_models: dict[tuple[str, str, int], Any] = {}
_models_lock = threading.Lock()


def shared_model(path: str, compute_type: str, threads: int) -> Any:
    """The process's ``WhisperModel`` for these settings, loaded on first use."""
    key = (path, compute_type, threads)
    with _models_lock:
        model = _models.get(key)
        if model is None:
            try:
                from faster_whisper import WhisperModel
            except ImportError as exc:
                raise RecognizerError(
                    f"engine 'whisper' needs faster-whisper ({exc}): "
                    "pip install 'mediaflow[whisper]'"
                ) from exc
            try:
                model = WhisperModel(
                    path, device="cpu", compute_type=compute_type, cpu_threads=threads
                )
            except (RuntimeError, ValueError, OSError) as exc:
                raise RecognizerError(f"whisper model {path} failed to load: {exc}") from exc
            _models[key] = model
        return model


@dataclass(frozen=True, slots=True)
class Decoded:
    text: str
    confidence: float | None


def words_of(segments: Iterable[Any]) -> Decoded:
    """The text of faster-whisper's segments, with the mean token probability.

    Segments the model itself calls silence are left out: ``no_speech_prob`` over
    :data:`NO_SPEECH`, or over 0.6 with a mean log-probability under -1 (Whisper's
    own rule); so are segments with no letter or digit. Pure."""
    texts: list[str] = []
    weighted = tokens = 0.0
    for segment in segments:
        if segment.no_speech_prob > NO_SPEECH or (
            segment.no_speech_prob > 0.6 and segment.avg_logprob < -1.0
        ):
            continue
        text = segment.text.strip()
        if not any(c.isalnum() for c in text):
            continue  # "." or "...": what the model writes for a noise
        texts.append(text)
        count = max(1, len(segment.tokens))
        weighted += segment.avg_logprob * count
        tokens += count
    if not texts:
        return Decoded("", None)
    return Decoded(" ".join(texts), round(math.exp(weighted / tokens), 3))


class WhisperRecognizer:
    """See the module doc. Every method blocks; none is thread-safe."""

    def __init__(self, settings: WhisperSettings) -> None:
        self.settings = settings
        path = resolve_model(settings.model, flow_dir=settings.flow_dir, download=settings.download)
        self._model = shared_model(path, settings.compute_type, settings.cpu_threads)
        try:
            self._vad = SileroVad()
        except VadUnavailable as exc:
            raise RecognizerError(str(exc)) from exc
        self._finder = UtteranceFinder(settings.voice)
        self._audio = bytearray()  # the stream from sample _base on
        self._base = 0
        self._scored = 0  # samples the voice detector has scored
        self._next_partial = 0  # sample at which the next partial is due
        self._partial_cost_s = 0.0

    # -- Recognizer ---------------------------------------------------------------

    def feed(self, pcm16k: bytes) -> list[Result]:
        self._audio += pcm16k
        results: list[Result] = []
        for probability in self._vad.score(pcm16k):
            self._scored += 512
            for utterance in self._finder.push(probability):
                results += self._final(utterance)
        self._forget_before(self._finder.keep_from)
        if self._finder.start is not None and self.settings.partials:
            partial = self._partial()
            if partial is not None:
                results.append(partial)
        return results

    def flush(self) -> list[Result]:
        results: list[Result] = []
        utterance = self._finder.finish()
        if utterance is not None:
            results += self._final(utterance)
        self.reset()
        return results

    def reset(self) -> None:
        self._vad.reset()
        self._finder = UtteranceFinder(self.settings.voice)
        self._audio.clear()
        self._base = self._scored = self._next_partial = 0

    # -- decoding ---------------------------------------------------------------

    def _final(self, utterance: Utterance) -> list[Result]:
        self._next_partial = 0
        if utterance.sure_s < self.settings.voice.min_speech_s:
            return []  # noise that looked like speech now and then: never decoded
        audio = self._span(utterance.start, utterance.end)
        decoded = words_of(
            self._transcribe(audio, beam_size=self.settings.beam_size, without_timestamps=False)
        )
        if not decoded.text:
            return []
        return [
            Result(
                decoded.text,
                utterance.start / SAMPLE_RATE,
                utterance.end / SAMPLE_RATE,
                final=True,
                confidence=decoded.confidence,
            )
        ]

    def _partial(self) -> Result | None:
        start = self._finder.start
        assert start is not None
        now = self._scored
        if self._next_partial == 0:
            self._next_partial = start + round(self.settings.partial_every_s * SAMPLE_RATE)
        if now < self._next_partial or self._finder.sure_s < self.settings.voice.min_speech_s:
            return None
        began = time.perf_counter()
        decoded = words_of(
            self._transcribe(
                self._span(start, now),
                beam_size=1,
                temperature=0.0,
                without_timestamps=True,
            )
        )
        self._partial_cost_s = time.perf_counter() - began
        wait_s = max(self.settings.partial_every_s, PARTIAL_COST_FACTOR * self._partial_cost_s)
        self._next_partial = now + round(wait_s * SAMPLE_RATE)
        if not decoded.text:
            return None
        return Result(decoded.text, start / SAMPLE_RATE, now / SAMPLE_RATE, final=False)

    def _transcribe(self, audio: np.ndarray, **options: Any) -> Iterable[Any]:
        segments, _info = self._model.transcribe(
            audio,
            language=self.settings.language,
            vad_filter=False,
            condition_on_previous_text=False,
            **options,
        )
        return list(segments)

    # -- the audio kept -----------------------------------------------------------

    def _span(self, start: int, end: int) -> np.ndarray:
        assert start >= self._base, "audio an utterance needs was forgotten"
        begin, stop = (start - self._base) * 2, (end - self._base) * 2
        pcm = np.frombuffer(bytes(self._audio[begin:stop]), dtype="<i2")
        return pcm.astype(np.float32) / 32768.0

    def _forget_before(self, sample: int) -> None:
        drop = min(max(0, sample - self._base), len(self._audio) // 2)
        if drop:
            del self._audio[: drop * 2]
            self._base += drop
