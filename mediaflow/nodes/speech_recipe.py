"""How to build a speech node's recogniser, as a value that can cross to another process.

A recipe is everything the recogniser needs (the grammar's text, not its path, is in
it: the file is read once, where the node runs) and :meth:`build` makes the
recogniser. It is a frozen dataclass of plain values so that it pickles: the node
hands it to a recogniser host process (:mod:`mediaflow.nodes.speech_host`), which
builds the recogniser there, or builds it itself on its own thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mediaflow.nodes.pocketsphinx_config import SphinxSearch
from mediaflow.nodes.pocketsphinx_engine import PocketSphinxRecognizer
from mediaflow.nodes.recognizer import Recognizer, RecognizerError, load_engine
from mediaflow.nodes.whisper_engine import WhisperSettings
from mediaflow.nodes.whole_utterance import (
    DEFAULT_MAX_UTTERANCE_S,
    DEFAULT_PAD_AFTER_S,
    DEFAULT_PAD_BEFORE_S,
)


@dataclass(frozen=True)
class PocketSphinxRecipe:
    """The built-in engine's settings (see :class:`PocketSphinxRecognizer`)."""

    search: SphinxSearch
    model: Path | None = None
    dictionary: Path | None = None
    vad_mode: int = 0
    partials: bool = True
    decoder_options: dict[str, Any] = field(default_factory=dict)
    redecode: bool = True
    max_utterance_s: float = DEFAULT_MAX_UTTERANCE_S
    pad_before_s: float = DEFAULT_PAD_BEFORE_S
    pad_after_s: float = DEFAULT_PAD_AFTER_S

    def build(self) -> Recognizer:
        """Load the model (blocks ~0.1-0.4 s). Raises :class:`RecognizerError`."""
        return PocketSphinxRecognizer(
            self.search,
            model=self.model,
            dictionary=self.dictionary,
            vad_mode=self.vad_mode,
            partials=self.partials,
            decoder_options=self.decoder_options,
            redecode=self.redecode,
            max_utterance_s=self.max_utterance_s,
            pad_before_s=self.pad_before_s,
            pad_after_s=self.pad_after_s,
        )


@dataclass(frozen=True)
class EngineRecipe:
    """Another engine: ``"package.module:Class"`` built with ``options``."""

    target: str
    options: dict[str, Any]
    search_dir: Path | None = None

    def build(self) -> Recognizer:
        return load_engine(self.target, self.options, self.search_dir)


RecognizerRecipe = PocketSphinxRecipe | EngineRecipe | WhisperSettings


def read_grammar(path: Path | None) -> str | None:
    """The grammar file's text. Raises :class:`RecognizerError` naming the file."""
    if path is None:
        return None
    try:
        return path.read_text()
    except OSError as exc:
        raise RecognizerError(f"cannot read grammar {path}: {exc}") from exc
