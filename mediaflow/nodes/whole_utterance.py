"""Final transcripts as pocketsphinx gives them for an utterance decoded whole.

A ``Decoder`` fed a stream piece by piece normalises its cepstra with a *live*
mean (CMN): an estimate carried from utterance to utterance, which a fresh
decoder does not have yet and which lags when the voice or the room changes.
Decoded whole (``process_raw(audio, full_utt=True)``), an utterance gets the
model's own *batch* CMN, the mean of that utterance: better words (the first
utterance of a stream above all). :class:`WholeUtteranceDecoder` does that
second pass, and :class:`UtteranceAudio` keeps the audio it needs, bounded.

What pocketsphinx 5.1.1 really does, read in its source and checked here:

* ``full_utt=True`` gives batch CMN only on a decoder that never streamed: the
  first block it processes without ``full_utt`` switches its feature
  computation to live CMN for good (``feat_cmn`` in ``feat.c``). So the
  streaming decoder cannot do the second pass; a decoder of its own does.
* Batch CMN keeps no state between utterances (it overwrites the estimate),
  but the front end's noise removal (``remove_noise``, on in the en-us model)
  tracks the noise floor across utterances: a reused decoder gives other
  scores, and now and then other words, than a fresh one.
  ``Decoder.start_stream()`` resets that floor (it warns that it is deprecated;
  it is still the only way), after which a reused decoder gives exactly what
  a fresh one gives, score included.
"""

from __future__ import annotations

import warnings
from typing import Any, Final

SAMPLE_RATE: Final = 16000
"""What every recogniser hears: 16 kHz, mono, signed 16-bit little-endian PCM."""
BYTES_PER_SECOND: Final = 2 * SAMPLE_RATE

DEFAULT_MAX_UTTERANCE_S: Final = 30.0
"""An utterance longer than this is cut here (see :class:`UtteranceAudio`)."""


class WholeUtteranceDecoder:
    """One pocketsphinx ``Decoder`` that only ever decodes whole utterances.

    ``decoder`` must be configured as the streaming one (search activated) and
    must never be given audio by anyone else. :meth:`decode` blocks for the
    whole decode (holding the GIL: pocketsphinx does not release it) and is not
    thread-safe; it raises ``RuntimeError`` if pocketsphinx fails.
    """

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder

    def decode(self, pcm16k: bytes) -> str:
        """The words pocketsphinx hears in ``pcm16k`` (16 kHz mono s16) decoded whole,
        as a fresh decoder with the same configuration would; ``""`` for none."""
        if len(pcm16k) < 2:
            return ""
        with warnings.catch_warnings():
            # "start_stream() is deprecated and unnecessary": it is neither (see the
            # module doc). catch_warnings is process-wide: a filter another thread
            # adds inside this short window is undone, its warnings are not lost.
            warnings.simplefilter("ignore", DeprecationWarning)
            self._decoder.start_stream()
        self._decoder.start_utt()
        try:
            self._decoder.process_raw(pcm16k, full_utt=True)
        finally:
            self._decoder.end_utt()
        hyp = self._decoder.hyp()
        return "" if hyp is None else str(hyp.hypstr).strip()


class UtteranceAudio:
    """The speech of the utterance in progress, as the endpointer hands it; bounded.

    Policy at the cap: :meth:`add` accepts at most ``max_s`` seconds. Once
    :attr:`full`, the recogniser ends the utterance there (a final for what was
    heard) and the speech that follows starts a new one: someone talking for
    minutes without a 0.3 s pause gets one final per ``max_s`` seconds, and a
    word on a cut may be split or lost. Memory is at most ``max_s`` times 32 kB
    (30 s: ~1 MB) plus the decoder's buffers for that much audio.
    """

    def __init__(self, max_s: float = DEFAULT_MAX_UTTERANCE_S) -> None:
        if not max_s > 0:
            raise ValueError(f"max_utterance_s must be positive; got {max_s!r}")
        self.max_bytes = max(2, int(max_s * SAMPLE_RATE) * 2)
        self._pcm = bytearray()

    def add(self, speech: bytes) -> bytes:
        """Keep what fits of ``speech``; return the rest (empty when all fit)."""
        room = self.max_bytes - len(self._pcm)
        self._pcm += speech[:room]
        return speech[room:]

    @property
    def full(self) -> bool:
        return len(self._pcm) >= self.max_bytes

    @property
    def seconds(self) -> float:
        return len(self._pcm) / BYTES_PER_SECOND

    def take(self) -> bytes:
        """The utterance's audio; the buffer is empty afterwards."""
        pcm = bytes(self._pcm)
        self._pcm.clear()
        return pcm

    def clear(self) -> None:
        self._pcm.clear()
