"""The built-in speech engine: pocketsphinx, utterance by utterance.

:class:`PocketSphinxRecognizer` is a :class:`~mediaflow.nodes.recognizer.Recognizer`:
pocketsphinx's ``Endpointer`` cuts the stream into utterances, a ``Decoder`` with
the bundled en-us model (or another model, dictionary and language model; see
:mod:`mediaflow.nodes.pocketsphinx_config`) decodes each, under a JSGF grammar, a
keyphrase or an n-gram language model: streamed for partials, and whole once the
utterance ended for its final (exactly what a fresh decoder gives for that audio,
the endpointer's span with 0.2 s of the stream after it, the silence a recording
of the sentence ends with; see :mod:`mediaflow.nodes.whole_utterance`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from mediaflow.nodes.pocketsphinx_config import SphinxSearch, new_decoder, sphinx_config
from mediaflow.nodes.recognizer import RecognizerError, Result
from mediaflow.nodes.whole_utterance import (
    BYTES_PER_SECOND,
    DEFAULT_MAX_UTTERANCE_S,
    DEFAULT_PAD_AFTER_S,
    DEFAULT_PAD_BEFORE_S,
    SAMPLE_RATE,
    RecentAudio,
    UtteranceAudio,
    WholeUtteranceDecoder,
)


class PocketSphinxRecognizer:
    """pocketsphinx 5: ``Endpointer`` for utterances, ``Decoder`` for words.

    Construction loads the model (~0.1-0.4 s; twice with partials, see below)
    and blocks. ``model`` is an acoustic model directory, ``dictionary`` a
    pronunciation dictionary; both default to the bundled en-us ones.
    ``decoder_options`` go to pocketsphinx's ``Config`` as is
    (``{"beam": 1e-60}``); with a grammar, ``bestpath`` defaults to false: the
    lattice rescoring pass may pick a path that stops inside the grammar ("what
    time" for "what time is it"), the grammar's own Viterbi path cannot.

    Finals. With ``redecode`` (the default) each final is what pocketsphinx gives
    for that utterance's audio decoded whole by a fresh decoder of the same
    configuration (batch CMN; see :mod:`mediaflow.nodes.whole_utterance`). The
    audio decoded is the stream as fed from ``pad_before_s`` before the
    endpointer's ``speech_start`` to ``pad_after_s`` after its ``speech_end``:
    the endpointer ends an utterance about 0.2 s after the voice stops, short
    of the trailing silence a recording of the sentence has, and without that
    silence a near word flips ("set the water to warm" where the recording,
    decoded whole, says "cold"). The defaults are measured (see
    :mod:`mediaflow.nodes.whole_utterance`): ``pad_after_s`` 0.2 s is the middle
    of the post-rolls that make every test sentence's final its recording's
    whole decode (0.15-0.25 s); a pre-roll never helped, hence ``pad_before_s``
    0. A final's ``start``/``end`` are those of the audio decoded. It comes
    once its post-roll is fed: up to 0.27 s, no later than without one (the
    endpointer reports an end 0.27 s after ``speech_end``); a longer one,
    ``pad_after_s`` - 0.27 s later. Spans never overlap: speech that starts inside the last
    utterance's post-roll ends that post-roll there (its final is decoded at
    once), and a pre-roll never reaches back before the last final's end. (The
    endpointer names a start 0.27 s late: with a post-roll longer than that,
    speech may start inside one already decoded, and then starts at its end.)
    Partials come from a streaming decoder (live CMN) fed the endpointer's
    speech; that decoder is not built when ``partials`` is false. An utterance
    whose audio (pads included) reaches ``max_utterance_s`` is cut there: a
    final for what was heard, and what follows starts a new utterance at the
    cut. ``redecode=False`` gives the streaming decoder's own finals, at the
    same times (cheaper, less accurate).

    Raises :class:`RecognizerError` when pocketsphinx is missing or refuses the
    configuration, naming the words a grammar uses that the dictionary lacks;
    ``ValueError`` for a ``max_utterance_s`` that is not positive or a negative
    pad.
    """

    def __init__(
        self,
        search: SphinxSearch | None = None,
        *,
        model: Path | None = None,
        dictionary: Path | None = None,
        vad_mode: int = 0,
        partials: bool = True,
        decoder_options: Mapping[str, Any] | None = None,
        redecode: bool = True,
        max_utterance_s: float = DEFAULT_MAX_UTTERANCE_S,
        pad_before_s: float = DEFAULT_PAD_BEFORE_S,
        pad_after_s: float = DEFAULT_PAD_AFTER_S,
    ) -> None:
        if not (pad_before_s >= 0 and pad_after_s >= 0):
            raise ValueError(
                f"pad_before_s and pad_after_s must be >= 0; got {pad_before_s!r}, {pad_after_s!r}"
            )
        try:
            # Imported here, by name: a flow with another engine must not need it, and
            # the package ships no type information (everything from it is Any).
            pocketsphinx = importlib.import_module("pocketsphinx")
        except ImportError as exc:
            raise RecognizerError(
                "the speech node needs pocketsphinx: pip install pocketsphinx"
            ) from exc
        self._search = search or SphinxSearch()
        self._partials = partials
        self._vad_mode = vad_mode
        self._audio = UtteranceAudio(max_utterance_s)
        self._pad_before = _position(pad_before_s)
        self._pad_after = _position(pad_after_s)
        # The endpointer names an utterance's start a window after the fact.
        window = float(pocketsphinx.Endpointer.DEFAULT_WINDOW)
        self._recent = RecentAudio(pad_before_s + window + _RECENT_MARGIN_S)
        self._make_endpointer: Callable[[], Any] = lambda: pocketsphinx.Endpointer(
            vad_mode=vad_mode, sample_rate=SAMPLE_RATE
        )
        config = sphinx_config(self._search, model, dictionary, decoder_options)
        # The streaming decoder: partials, and the finals when not re-decoding.
        self._live: Any = (
            new_decoder(pocketsphinx, self._search, config) if partials or not redecode else None
        )
        self._whole = (
            WholeUtteranceDecoder(new_decoder(pocketsphinx, self._search, config))
            if redecode
            else None
        )
        self._endpointer: Any = self._make_endpointer()
        self._frame_bytes = int(self._endpointer.frame_bytes)
        self._pending = bytearray()
        # Positions are bytes of audio fed since the last (re)start.
        self._fed = 0
        self._start: int | None = None  # the utterance being collected starts here
        self._until: int | None = None  # once its speech ended: its post-roll ends here
        self._floor = 0  # the last final's audio ended here
        self._speech: int | None = None  # in speech: the live decoder has heard up to here
        self._live_text = ""  # the live decoder's words for the utterance (no redecode)

    def feed(self, pcm16k: bytes) -> list[Result]:
        """See :meth:`Recognizer.feed`. Raises ``RuntimeError`` if pocketsphinx fails.

        Blocks for one endpointer frame at a time, and for the whole decode of each
        utterance whose post-roll ends in ``pcm16k``."""
        self._pending += pcm16k
        whole = len(self._pending) - len(self._pending) % self._frame_bytes
        results: list[Result] = []
        view = memoryview(self._pending)
        try:
            for offset in range(0, whole, self._frame_bytes):
                results += self._frame(bytes(view[offset : offset + self._frame_bytes]))
        finally:
            view.release()
        del self._pending[:whole]
        if self._partials and self._speech is not None and self._start is not None:
            partial = self._hypothesis()
            if partial:
                # The endpointer hands speech a window late: the hypothesis covers
                # what the decoder has had, not everything fed.
                end = _seconds(max(self._speech, self._start))
                results.append(Result(partial, _seconds(self._start), end, final=False))
        return results

    def flush(self) -> list[Result]:
        """See :meth:`Recognizer.flush`. An utterance still in speech, or still
        collecting its post-roll, ends with the stream."""
        results: list[Result] = []
        tail = bytes(self._pending[: len(self._pending) // 2 * 2])
        if self._speech is not None:
            # end_stream raises IndexError on an empty buffer (pocketsphinx 5), which a
            # stream ending on a frame boundary gives it; one zero sample is padded
            # to a frame of silence, as any short tail is.
            rest = self._endpointer.end_stream(bytes(self._pending) or b"\0\0")
            if rest is not None:
                self._hear(rest)
            self._end_speech()
        if self._start is not None:
            results += self._collect(tail)
        if self._start is not None:
            results += self._finish(self._start + self._audio.size)
        self._restart()
        return results

    def reset(self) -> None:
        """See :meth:`Recognizer.reset`."""
        if self._speech is not None and self._live is not None:
            self._live.end_utt()
        self._restart()

    def _frame(self, frame: bytes) -> list[Result]:
        was_speech = self._endpointer.in_speech
        speech = self._endpointer.process(frame)
        self._recent.add(frame)
        self._fed += len(frame)
        results = self._collect(frame) if self._start is not None else []
        if speech is None:
            return results
        if not was_speech:
            results += self._speech_started(_position(self._endpointer.speech_start))
        self._hear(speech)
        if not self._endpointer.in_speech:
            self._end_speech()
            self._until = _position(self._endpointer.speech_end) + self._pad_after
            results += self._collect(b"")
        return results

    def _speech_started(self, at: int) -> list[Result]:
        results: list[Result] = []
        if self._start is not None:
            # The last utterance is still collecting its post-roll: it ends here.
            assert self._until is not None
            results += self._finish(min(self._until, at))
        self._speech = at
        if self._live is not None:
            self._live.start_utt()
        self._start, pcm = self._recent.since(max(at - self._pad_before, self._floor))
        self._audio.clear()
        return results + self._collect(pcm)

    def _hear(self, speech: bytes) -> None:
        """The endpointer's speech, to the streaming decoder."""
        assert self._speech is not None
        if self._live is not None:
            self._live.process_raw(speech)
        self._speech += len(speech)

    def _end_speech(self) -> None:
        self._speech = None
        if self._live is not None:
            self._live.end_utt()
            self._live_text = self._hypothesis()

    def _collect(self, pcm: bytes) -> list[Result]:
        """The stream as fed, to the utterance being collected: its speech until the
        endpointer ends it, then up to the end of its post-roll; cut at the cap."""
        results: list[Result] = []
        while self._start is not None:
            if self._until is not None:
                self._audio.add(pcm[: max(0, self._until - self._start - self._audio.size)])
                if self._start + self._audio.size >= self._until or self._audio.full:
                    results += self._finish(self._until)
                return results
            pcm = self._audio.add(pcm)
            if not self._audio.full:
                return results
            # At the cap, mid-speech: a final for what was heard; what follows starts a
            # new utterance at the cut, without a pre-roll (the pieces abut).
            cut = self._start + self._audio.size
            if self._live is not None:
                self._live.end_utt()
                self._live_text = self._hypothesis()
            results += self._finish(cut)
            if self._live is not None:
                self._live.start_utt()
            self._start = cut
        return results

    def _finish(self, end: int) -> list[Result]:
        """Decode the utterance's audio up to ``end`` (or all it has, if less)."""
        start = self._start
        assert start is not None
        pcm = self._audio.take(max(0, end - start))
        self._start = self._until = None
        self._floor = start + len(pcm)
        text = self._whole.decode(pcm) if self._whole is not None else self._live_text
        self._live_text = ""
        if not text:
            return []
        return [Result(text, _seconds(start), _seconds(start + len(pcm)), final=True)]

    def _hypothesis(self) -> str:
        hyp = None if self._live is None else self._live.hyp()
        return "" if hyp is None else str(hyp.hypstr).strip()

    def _restart(self) -> None:
        # The endpointer has no reset and counts time from its creation: a new one
        # is the only way to restart both its state and its clock.
        self._endpointer = self._make_endpointer()
        self._pending.clear()
        self._audio.clear()
        self._recent.clear()
        self._fed = 0
        self._start = self._until = self._speech = None
        self._floor = 0
        self._live_text = ""


_RECENT_MARGIN_S: Final = 0.1
"""Kept beyond the pre-roll and the endpointer's window (a few frames)."""


def _position(seconds: float) -> int:
    """Seconds of 16 kHz mono s16 audio as a byte position (whole samples)."""
    return round(seconds * SAMPLE_RATE) * 2


def _seconds(position: int) -> float:
    return position / BYTES_PER_SECOND
