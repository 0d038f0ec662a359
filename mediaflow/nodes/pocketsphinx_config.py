"""What pocketsphinx listens for, and its decoder built for it.

:class:`SphinxSearch` is the search (a JSGF grammar, a keyphrase, an n-gram
language model, or the bundled en-us model), :data:`VAD_MODES` the endpointer's
voice detector settings by name, :func:`sphinx_config` the decoder's settings
for a search, and :func:`new_decoder` a decoder built from them, explaining a
grammar pocketsphinx refuses (:func:`grammar_words`). Pure but for
:func:`new_decoder`; nothing here imports pocketsphinx, so the speech node reads
its options without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mediaflow.nodes.recognizer import RecognizerError
from mediaflow.nodes.whole_utterance import SAMPLE_RATE

VAD_MODES: Final[Mapping[str, int]] = {
    "loose": 0,
    "medium_loose": 1,
    "medium_strict": 2,
    "strict": 3,
}
"""pocketsphinx's voice activity detector, least to most aggressive at calling noise."""


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


@dataclass(frozen=True)
class SphinxSearch:
    """What pocketsphinx listens for: exactly one of a JSGF grammar (its text), a
    keyphrase, or a language model file; none of them means the bundled en-us LM."""

    grammar: str | None = None
    grammar_name: str = "grammar"
    keyphrase: str | None = None
    kws_threshold: float = 1e-20
    lm: Path | None = None


def sphinx_config(
    search: SphinxSearch,
    model: Path | None = None,
    dictionary: Path | None = None,
    decoder_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of pocketsphinx's ``Decoder`` for these settings. Pure.

    A grammar is not in it: it is added to the decoder (``add_jsgf_string``, then
    ``activate_search`` under ``search.grammar_name``) once built."""
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
    return config


def new_decoder(pocketsphinx: Any, search: SphinxSearch, config: Mapping[str, Any]) -> Any:
    """A ``pocketsphinx.Decoder`` with ``config``, its grammar (if any) active.
    Raises :class:`RecognizerError` saying what pocketsphinx refused."""
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
