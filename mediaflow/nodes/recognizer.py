"""The recogniser interface the speech node drives, and its pocketsphinx engine.

A :class:`Recognizer` hears one audio stream as 16 kHz mono s16 PCM, in order,
in pieces of any size, and says what was spoken: :meth:`~Recognizer.feed`
returns the results the new audio completed (finished utterances, and a
hypothesis for the utterance still being spoken), :meth:`~Recognizer.flush`
finishes the utterance in progress when the stream ends or breaks, and
:meth:`~Recognizer.reset` forgets it. Times in a :class:`Result` are seconds of
audio fed since the recogniser was made or last flushed or reset; the node maps
them to the stream's own clock. A recogniser is stateful and not thread-safe:
the node calls it from one dedicated thread, and every call blocks (decoding
is CPU-bound).

:class:`PocketSphinxRecognizer` is the built-in engine: pocketsphinx's
``Endpointer`` cuts the stream into utterances, a ``Decoder`` with the bundled
en-us model (or another model, dictionary and language model) decodes each,
under a JSGF grammar, a keyphrase or an n-gram language model. Another engine
(a Whisper model, say) plugs in with ``engine = "package.module:Class"``: any
class whose instances have these three methods; :func:`load_engine` builds it.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from mediaflow.flows.registry import TargetImportError, import_target

SAMPLE_RATE: Final = 16000
"""What every recogniser hears: 16 kHz, mono, signed 16-bit little-endian PCM."""

VAD_MODES: Final[Mapping[str, int]] = {
    "loose": 0,
    "medium_loose": 1,
    "medium_strict": 2,
    "strict": 3,
}
"""pocketsphinx's voice activity detector, least to most aggressive at calling noise."""


class RecognizerError(RuntimeError):
    """A recogniser could not be built (missing package, bad model, bad grammar)."""


@dataclass(frozen=True, slots=True)
class Result:
    """What a recogniser heard: a finished utterance (``final``) or a hypothesis.

    ``start``/``end`` are seconds of audio fed since the recogniser started
    (or was last flushed or reset). ``text`` is never empty.
    """

    text: str
    start: float
    end: float
    final: bool


@runtime_checkable
class Recognizer(Protocol):
    """One audio stream in, results out. Every method blocks; none is thread-safe."""

    def feed(self, pcm16k: bytes) -> list[Result]:
        """Hear the next piece of the stream (16 kHz mono s16, any length, even odd);
        return the results it completed, oldest first. At most the last is a
        hypothesis (``final=False``) for the utterance still being spoken."""
        ...

    def flush(self) -> list[Result]:
        """The stream ended or broke: finish the utterance in progress and return it.
        The next ``feed`` starts a new stream at time 0."""
        ...

    def reset(self) -> None:
        """Forget the utterance in progress without a result; time restarts at 0."""
        ...


def resolve_vad_mode(value: int | str) -> int:
    """``vad_mode`` as pocketsphinx's number (0-3); names from :data:`VAD_MODES` work too.

    Raises ``ValueError`` for anything else.
    """
    if isinstance(value, str) and value.lower() in VAD_MODES:
        return VAD_MODES[value.lower()]
    if isinstance(value, int) and not isinstance(value, bool) and value in VAD_MODES.values():
        return value
    names = ", ".join(f"{name} ({n})" for name, n in VAD_MODES.items())
    raise ValueError(f"vad_mode must be one of {names}; got {value!r}")


def load_engine(
    target: str, options: Mapping[str, Any], search_dir: Path | None = None
) -> Recognizer:
    """Build the recogniser class named ``"package.module:Class"`` with ``**options``.

    A module next to the flow file (``search_dir``) is importable. Blocks while the
    class loads its model. Raises :class:`RecognizerError` if the import fails, the
    constructor raises, or the instance lacks ``feed``/``flush``/``reset``.
    """
    try:
        factory = import_target(target, search_dir)
    except TargetImportError as exc:
        raise RecognizerError(f"engine {target!r}: {exc}") from exc
    if not callable(factory):
        raise RecognizerError(f"engine {target!r} is not a class or factory")
    try:
        engine = factory(**options)
    except Exception as exc:
        raise RecognizerError(f"engine {target!r} failed to start: {exc}") from exc
    if not isinstance(engine, Recognizer):
        raise RecognizerError(f"engine {target!r} lacks feed(pcm16k), flush() and reset()")
    return engine


@dataclass(frozen=True)
class SphinxSearch:
    """What pocketsphinx listens for: exactly one of a JSGF grammar (its text), a
    keyphrase, or a language model file; none of them means the bundled en-us LM."""

    grammar: str | None = None
    grammar_name: str = "grammar"
    keyphrase: str | None = None
    kws_threshold: float = 1e-20
    lm: Path | None = None


class PocketSphinxRecognizer:
    """pocketsphinx 5: ``Endpointer`` for utterances, ``Decoder`` for words.

    Construction loads the model (~0.1-0.4 s) and blocks. ``model`` is an acoustic
    model directory, ``dictionary`` a pronunciation dictionary; both default to the
    bundled en-us ones. ``decoder_options`` go to pocketsphinx's ``Config`` as is
    (``{"beam": 1e-60}``); with a grammar, ``bestpath`` defaults to false: the
    lattice rescoring pass may pick a path that stops inside the grammar ("what
    time" for "what time is it"), the grammar's own Viterbi path cannot.
    Raises :class:`RecognizerError` when pocketsphinx is missing or refuses the
    configuration, naming the words a grammar uses that the dictionary lacks.
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
    ) -> None:
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
        self._make_endpointer: Callable[[], Any] = lambda: pocketsphinx.Endpointer(
            vad_mode=vad_mode, sample_rate=SAMPLE_RATE
        )
        self._decoder = _decoder(pocketsphinx, self._search, model, dictionary, decoder_options)
        self._endpointer: Any = self._make_endpointer()
        self._frame_bytes = int(self._endpointer.frame_bytes)
        self._pending = bytearray()
        self._frames = 0  # endpointer frames heard since the last (re)start
        self._utterance_start: float | None = None  # set while inside an utterance
        self._utterance_bytes = 0  # speech the decoder has had in this utterance

    def feed(self, pcm16k: bytes) -> list[Result]:
        """See :meth:`Recognizer.feed`. Raises ``RuntimeError`` if pocketsphinx fails."""
        self._pending += pcm16k
        whole = len(self._pending) - len(self._pending) % self._frame_bytes
        results: list[Result] = []
        view = memoryview(self._pending)
        try:
            for offset in range(0, whole, self._frame_bytes):
                final = self._frame(bytes(view[offset : offset + self._frame_bytes]))
                if final is not None:
                    results.append(final)
        finally:
            view.release()
        del self._pending[:whole]
        if self._partials and self._utterance_start is not None:
            partial = self._hypothesis()
            if partial:
                # The endpointer hands speech on a window late: the hypothesis covers
                # what the decoder has had, not everything fed.
                end = self._utterance_start + self._utterance_bytes / 2 / SAMPLE_RATE
                results.append(Result(partial, self._utterance_start, end, final=False))
        return results

    def flush(self) -> list[Result]:
        """See :meth:`Recognizer.flush`."""
        results: list[Result] = []
        if self._utterance_start is not None:
            tail = self._endpointer.end_stream(bytes(self._pending))
            if tail is not None:
                self._decoder.process_raw(tail)
            end = self._now() + len(self._pending) / 2 / SAMPLE_RATE
            final = self._end_utterance(end)
            if final is not None:
                results.append(final)
        self._restart()
        return results

    def reset(self) -> None:
        """See :meth:`Recognizer.reset`."""
        if self._utterance_start is not None:
            self._decoder.end_utt()
        self._restart()

    def _frame(self, frame: bytes) -> Result | None:
        was_speech = self._endpointer.in_speech
        speech = self._endpointer.process(frame)
        self._frames += 1
        if speech is None:
            return None
        if not was_speech:
            self._utterance_start = float(self._endpointer.speech_start)
            self._utterance_bytes = 0
            self._decoder.start_utt()
        self._decoder.process_raw(speech)
        self._utterance_bytes += len(speech)
        if self._endpointer.in_speech:
            return None
        return self._end_utterance(float(self._endpointer.speech_end))

    def _end_utterance(self, end: float) -> Result | None:
        start = self._utterance_start
        self._utterance_start = None
        self._decoder.end_utt()
        text = self._hypothesis()
        if not text or start is None:
            return None
        return Result(text, start, end, final=True)

    def _hypothesis(self) -> str:
        hyp = self._decoder.hyp()
        return "" if hyp is None else str(hyp.hypstr).strip()

    def _now(self) -> float:
        return self._frames * self._frame_bytes / 2 / SAMPLE_RATE

    def _restart(self) -> None:
        # The endpointer has no reset and counts time from its creation: a new one
        # is the only way to restart both its state and its clock.
        self._endpointer = self._make_endpointer()
        self._pending.clear()
        self._frames = 0
        self._utterance_start = None


def _decoder(
    pocketsphinx: Any,
    search: SphinxSearch,
    model: Path | None,
    dictionary: Path | None,
    decoder_options: Mapping[str, Any] | None,
) -> Any:
    config: dict[str, Any] = {"loglevel": "FATAL", "samprate": SAMPLE_RATE}
    if model is not None:
        config["hmm"] = str(model)
    if dictionary is not None:
        config["dict"] = str(dictionary)
    if search.grammar is not None:
        config.update(lm=None, bestpath=False)
    elif search.keyphrase is not None:
        config.update(keyphrase=search.keyphrase, kws_threshold=search.kws_threshold)
    elif search.lm is not None:
        config["lm"] = str(search.lm)
    config.update(decoder_options or {})
    try:
        decoder = pocketsphinx.Decoder(**config)
    except (ValueError, RuntimeError) as exc:
        raise RecognizerError(f"pocketsphinx refused its configuration: {exc}") from exc
    if search.grammar is not None:
        _activate_grammar(decoder, search)
    return decoder


def _activate_grammar(decoder: Any, search: SphinxSearch) -> None:
    assert search.grammar is not None
    try:
        decoder.add_jsgf_string(search.grammar_name, search.grammar)
    except (ValueError, RuntimeError) as exc:
        missing = sorted(w for w in grammar_words(search.grammar) if not decoder.lookup_word(w))
        why = (
            f"words missing from the dictionary: {', '.join(missing)}"
            if missing
            else "it is not valid JSGF"
        )
        raise RecognizerError(f"grammar {search.grammar_name!r} was refused: {why}") from exc
    decoder.activate_search(search.grammar_name)


_JSGF_RULE_BODY = re.compile(r"=([^;]*);")
_JSGF_NOT_WORDS = re.compile(r"<[^>]*>|\{[^}]*\}|/[^/]*/|[()\[\]|*+]")


def grammar_words(grammar: str) -> set[str]:
    """The words a JSGF grammar's rules use (rule references, tags and weights removed).

    Pure and approximate (quoted tokens are not unquoted); used to explain a
    grammar pocketsphinx refused.
    """
    body = re.sub(r"//[^\n]*|/\*.*?\*/", " ", grammar, flags=re.DOTALL)
    words: set[str] = set()
    for rule in _JSGF_RULE_BODY.findall(body):
        words.update(_JSGF_NOT_WORDS.sub(" ", rule).split())
    return words
