"""The speech node's options: which go together, and what each engine takes from them.

A flow gives the node one flat set of options (see
:class:`~mediaflow.nodes.speech.SpeechNode`). :func:`check_options` refuses a set
that contradicts itself; :func:`sphinx_options` and :func:`whisper_settings` turn
the rest into the settings of the engine chosen, defaults filled in.
:class:`SphinxOptions` keeps pocketsphinx's file options relative to the flow
file until the node knows where that is (at setup), when :meth:`SphinxOptions.recipe`
resolves them and reads the grammar. Pure, but for that read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from mediaflow.nodes.pocketsphinx_config import SphinxSearch, resolve_vad_mode
from mediaflow.nodes.speech_recipe import PocketSphinxRecipe, read_grammar
from mediaflow.nodes.voice_activity import VoiceSettings
from mediaflow.nodes.whisper_engine import WhisperSettings
from mediaflow.nodes.whisper_models import DEFAULT_MODEL
from mediaflow.nodes.whole_utterance import (
    DEFAULT_MAX_UTTERANCE_S,
    DEFAULT_PAD_AFTER_S,
    DEFAULT_PAD_BEFORE_S,
)

WHISPER: Final = "whisper"
POCKETSPHINX: Final = "pocketsphinx"
ISOLATIONS: Final = ("process", "thread")
DEFAULT_KWS_THRESHOLD: Final = 1e-20


def check_options(
    searches: Mapping[str, object],
    sphinx_settings: Mapping[str, object],
    *,
    kws_threshold: float | None,
    engine: str | None,
    engine_options: Mapping[str, Any] | None,
    whisper_settings: Mapping[str, object] | None = None,
) -> None:
    """Refuse contradictory speech options with a ``ValueError`` saying which. Pure.

    ``searches`` (grammar, keyphrase, lm) exclude each other; they and
    ``sphinx_settings`` configure pocketsphinx, so they exclude any other
    ``engine``; ``whisper_settings`` need ``engine = "whisper"``.
    """
    chosen = sorted(name for name, value in searches.items() if value is not None)
    if len(chosen) > 1:
        raise ValueError(f"speech: give at most one of grammar, keyphrase, lm; got {chosen}")
    if kws_threshold is not None and "keyphrase" not in chosen:
        raise ValueError("speech: kws_threshold needs a keyphrase")
    whisper = sorted(name for name, value in (whisper_settings or {}).items() if value is not None)
    if whisper and engine != WHISPER:
        raise ValueError(f"speech: {', '.join(whisper)} need engine = {WHISPER!r}")
    if engine in (None, POCKETSPHINX):
        if engine_options is not None:
            raise ValueError("speech: engine_options needs an engine")
        return
    sphinx = chosen + sorted(name for name, value in sphinx_settings.items() if value is not None)
    if engine == WHISPER:
        sphinx = [name for name in sphinx if name not in ("model", "max_utterance_s")]
    if sphinx:
        raise ValueError(
            f"speech: {', '.join(sphinx)} configure pocketsphinx, not {engine!r}"
            + ("" if engine == WHISPER else "; pass the engine's own settings in engine_options")
        )
    if engine == WHISPER and engine_options is not None:
        raise ValueError("speech: engine 'whisper' takes its settings as the node's own options")


@dataclass(frozen=True)
class SphinxOptions:
    """pocketsphinx's options as the flow gives them, checked and defaulted: file
    options (``grammar``, ``lm``, ``model``, ``dictionary``) still relative to the
    flow file. Raises ``ValueError`` for a negative pad or a ``max_utterance_s``
    that is not positive."""

    grammar: str | None = None
    keyphrase: str | None = None
    kws_threshold: float = DEFAULT_KWS_THRESHOLD
    lm: str | None = None
    model: str | None = None
    dictionary: str | None = None
    vad_mode: int = 0
    partials: bool = True
    decoder_options: Mapping[str, Any] = field(default_factory=dict)
    redecode: bool = True
    max_utterance_s: float = DEFAULT_MAX_UTTERANCE_S
    pad_before_s: float = DEFAULT_PAD_BEFORE_S
    pad_after_s: float = DEFAULT_PAD_AFTER_S

    def __post_init__(self) -> None:
        if self.pad_before_s < 0 or self.pad_after_s < 0:
            raise ValueError("speech: pad_before_s and pad_after_s must be 0 or more")
        if not self.max_utterance_s > 0:
            raise ValueError(
                f"speech: max_utterance_s must be positive; got {self.max_utterance_s!r}"
            )

    def recipe(self, flow_dir: Path) -> PocketSphinxRecipe:
        """The recogniser's recipe, paths resolved against ``flow_dir`` and the grammar
        read. Raises :class:`~mediaflow.nodes.recognizer.RecognizerError` naming a
        grammar file that cannot be read."""

        def path(option: str | None) -> Path | None:
            if option is None:
                return None
            resolved = Path(option).expanduser()
            return resolved if resolved.is_absolute() else flow_dir / resolved

        grammar_path = path(self.grammar)
        search = SphinxSearch(
            grammar=read_grammar(grammar_path),
            grammar_name=grammar_path.stem if grammar_path is not None else "grammar",
            keyphrase=self.keyphrase,
            kws_threshold=self.kws_threshold,
            lm=path(self.lm),
        )
        return PocketSphinxRecipe(
            search,
            model=path(self.model),
            dictionary=path(self.dictionary),
            vad_mode=self.vad_mode,
            partials=self.partials,
            decoder_options=dict(self.decoder_options),
            redecode=self.redecode,
            max_utterance_s=self.max_utterance_s,
            pad_before_s=self.pad_before_s,
            pad_after_s=self.pad_after_s,
        )


def sphinx_options(
    *,
    grammar: str | None,
    keyphrase: str | None,
    lm: str | None,
    kws_threshold: float | None,
    model: str | None,
    dictionary: str | None,
    vad_mode: int | str,
    partials: bool,
    decoder_options: Mapping[str, Any] | None,
    redecode: bool | None,
    max_utterance_s: float | None,
    pad_before_s: float | None,
    pad_after_s: float | None,
) -> SphinxOptions:
    """pocketsphinx's options from the node's (None: the default). Raises
    ``ValueError`` naming a bad one."""
    return SphinxOptions(
        grammar=grammar,
        keyphrase=keyphrase,
        kws_threshold=DEFAULT_KWS_THRESHOLD if kws_threshold is None else float(kws_threshold),
        lm=lm,
        model=model,
        dictionary=dictionary,
        vad_mode=resolve_vad_mode(vad_mode),
        partials=partials,
        decoder_options=dict(decoder_options or {}),
        redecode=True if redecode is None else bool(redecode),
        max_utterance_s=(
            DEFAULT_MAX_UTTERANCE_S if max_utterance_s is None else float(max_utterance_s)
        ),
        pad_before_s=DEFAULT_PAD_BEFORE_S if pad_before_s is None else float(pad_before_s),
        pad_after_s=DEFAULT_PAD_AFTER_S if pad_after_s is None else float(pad_after_s),
    )


def whisper_settings(
    model: str | None,
    max_utterance_s: float | None,
    *,
    partials: bool,
    language: str | None,
    beam_size: int | None,
    compute_type: str | None,
    threads: int | None,
    download: bool | None,
    partial_every_s: float | None,
    vad_threshold: float | None,
    pad_s: float | None,
) -> WhisperSettings:
    """The Whisper engine's settings from the node's options (None: the default).
    Raises ``ValueError`` naming a bad one."""
    base, voice = WhisperSettings(), VoiceSettings()
    pad = voice.pad_s if pad_s is None else float(pad_s)
    try:
        return WhisperSettings(
            model=model or DEFAULT_MODEL,
            download=bool(download),
            language=language,
            beam_size=base.beam_size if beam_size is None else int(beam_size),
            compute_type=compute_type or base.compute_type,
            threads=base.threads if threads is None else int(threads),
            partials=partials,
            partial_every_s=(
                base.partial_every_s if partial_every_s is None else float(partial_every_s)
            ),
            voice=VoiceSettings(
                threshold=voice.threshold if vad_threshold is None else float(vad_threshold),
                min_silence_s=max(voice.min_silence_s, pad),
                pad_s=pad,
                max_utterance_s=(
                    voice.max_utterance_s if max_utterance_s is None else float(max_utterance_s)
                ),
            ),
        )
    except ValueError as exc:
        raise ValueError(f"speech: {exc}") from None
