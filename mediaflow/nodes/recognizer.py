"""The recogniser interface the speech node drives, and how another engine plugs in.

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

The built-in engines implement it: pocketsphinx
(:mod:`mediaflow.nodes.pocketsphinx_engine`, the default) and Whisper
(:mod:`mediaflow.nodes.whisper_engine`). Another engine plugs in with ``engine =
"package.module:Class"``: any class whose instances have these three methods;
:func:`load_engine` builds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mediaflow.flows.registry import TargetImportError, import_target


class RecognizerError(RuntimeError):
    """A recogniser could not be built (missing package, bad model, bad grammar)."""


@dataclass(frozen=True, slots=True)
class Result:
    """What a recogniser heard: a finished utterance (``final``) or a hypothesis.

    ``start``/``end`` are seconds of audio fed since the recogniser started
    (or was last flushed or reset). ``text`` is never empty. ``confidence`` (0-1)
    is set where the engine gives one (Whisper: the mean token probability).
    """

    text: str
    start: float
    end: float
    final: bool
    confidence: float | None = None


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
