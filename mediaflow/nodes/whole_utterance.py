"""Final transcripts as pocketsphinx gives them for an utterance decoded whole.

A ``Decoder`` fed a stream piece by piece normalises its cepstra with a *live*
mean (CMN): an estimate carried from utterance to utterance, which a fresh
decoder does not have yet and which lags when the voice or the room changes.
Decoded whole (``process_raw(audio, full_utt=True)``), an utterance gets the
model's own *batch* CMN, the mean of that utterance: better words (the first
utterance of a stream above all). :class:`WholeUtteranceDecoder` does that
second pass, and :class:`UtteranceAudio` keeps the audio it needs, bounded.

Padding (issue 25). The audio decoded is the stream as fed from
:data:`DEFAULT_PAD_BEFORE_S` before the endpointer's ``speech_start`` to
:data:`DEFAULT_PAD_AFTER_S` after its ``speech_end`` (:class:`RecentAudio`
keeps the recent stream a pre-roll comes from). The endpointer ends an
utterance about 0.2 s after the voice stops, short of the trailing silence a
recording of the sentence has (espeak-ng's: 0.2-0.45 s after the voice), and
batch CMN over the shorter span picks another near word: "set the water to
warm" where the recording, decoded whole, says "cold". Measured with a grammar
of near alternatives (``tests/test_speech_padding.py``): 16 espeak-ng
sentences in four voices, each placed at 10 phases of the endpointer's 30 ms
frames, give finals equal to the recording's whole decode for 155/160 with no
post-roll, 159 with 0.1 s, all 160 with 0.15-0.25 s, 159 with 0.3-0.4 s (too
much silence the recording does not have flips "off" to "on"); 88 sentences
at one phase agree (0.15-0.3 s), but for two on a knife edge that no padding
matches. 0.2 s leaves read speech alone (librivox WER 0.268, as without; 0.3 s:
0.296). A pre-roll never helped: 0.03 s changes nothing, 0.05-0.1 s loses a
card of pocketsphinx's "cards" recordings and 0.06 s espeak sentences.
It costs no latency at 0.2 s: the endpointer reports an end 0.27 s after
``speech_end``, by when the post-roll is already fed.

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
DEFAULT_PAD_BEFORE_S: Final = 0.0
"""Audio before the endpointer's ``speech_start`` decoded with an utterance (measured:
a pre-roll never made a final closer to the recording's whole decode)."""
DEFAULT_PAD_AFTER_S: Final = 0.2
"""Audio after the endpointer's ``speech_end`` decoded with an utterance: the trailing
silence a recording of it has (measured, issue 25; see the module doc)."""


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
    """The audio of the utterance being collected, as fed (pre-roll, speech, post-roll); bounded.

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

    def add(self, pcm: bytes) -> bytes:
        """Keep what fits of ``pcm``; return the rest (empty when all fit)."""
        room = self.max_bytes - len(self._pcm)
        self._pcm += pcm[:room]
        return pcm[room:]

    @property
    def full(self) -> bool:
        return len(self._pcm) >= self.max_bytes

    @property
    def size(self) -> int:
        """Bytes held."""
        return len(self._pcm)

    @property
    def seconds(self) -> float:
        return len(self._pcm) / BYTES_PER_SECOND

    def take(self, size: int | None = None) -> bytes:
        """The first ``size`` bytes held (all by default); the buffer is empty afterwards."""
        pcm = bytes(self._pcm[:size])
        self._pcm.clear()
        return pcm

    def clear(self) -> None:
        self._pcm.clear()


class RecentAudio:
    """The last ``keep_s`` seconds of a stream as fed, by byte position in it.

    Where an utterance's pre-roll comes from: the endpointer says an utterance
    started ``speech_start`` a window (0.3 s) after the fact, so the audio from
    ``pad_before_s`` before that is already fed and must still be here. Bounded:
    older audio is dropped as new comes (at most ``keep_s`` times 32 kB).
    """

    def __init__(self, keep_s: float) -> None:
        self.max_bytes = max(2, int(keep_s * SAMPLE_RATE) * 2)
        self._pcm = bytearray()
        self.end = 0  # stream position (bytes) just after the newest byte held

    @property
    def start(self) -> int:
        """Stream position (bytes) of the oldest byte held."""
        return self.end - len(self._pcm)

    def add(self, pcm: bytes) -> None:
        self._pcm += pcm
        self.end += len(pcm)
        if len(self._pcm) > self.max_bytes:
            del self._pcm[: len(self._pcm) - self.max_bytes]

    def since(self, position: int) -> tuple[int, bytes]:
        """The audio from stream position ``position`` (or the oldest held, if later)
        to the newest, with the position it really starts at."""
        start = max(position, self.start)
        return start, bytes(self._pcm[start - self.start :])

    def clear(self) -> None:
        """Forget the audio; positions restart at 0."""
        self._pcm.clear()
        self.end = 0
