"""A grammar final equals the sentence's own recording decoded whole (issue 25, item 3).

pocketsphinx's endpointer ends an utterance about 0.2 s after the voice stops,
short of the trailing silence a recording of the sentence has (espeak-ng pads
its output with 0.2-0.45 s), and without it a near word flips: the slow voice's
"set the water to cold", decoded over exactly the endpointer's span, is "set the
water to warm". So the recogniser decodes ``pad_after_s`` (0.2 s) more. Here:
espeak-ng sentences under a grammar of near alternatives (hot/cold/warm, on/off,
open/close, numbers), four voices, one stream with quiet room noise between
them; each final must be the sentence's own file decoded whole by a fresh
decoder, at 20, 100 and 320 ms chunks; then the mechanics of the pads.

Two details keep this deterministic. sox dithers when it requantises, from a
random seed unless ``-R``: without it a sentence's own file changes from run to
run, and a near word with it (measured). And the gaps are quiet (sigma 3):
room noise of sigma 30 right after espeak's digital silence keeps pocketsphinx's
VAD in speech for good, so the sentences would never end.

Left out, measured on the same corpus: two sentences on a knife edge that no
padding matches (the fast voice's "turn off the fan" is "turn on the fan" with
20 ms more of its own silence; its "set the heat to eight" file decodes to
nothing, any other span of it to the words).
"""

from __future__ import annotations

import itertools
import subprocess
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mediaflow.nodes.pocketsphinx_config import SphinxSearch
from mediaflow.nodes.pocketsphinx_engine import PocketSphinxRecognizer
from mediaflow.nodes.recognizer import Result
from mediaflow.nodes.whole_utterance import RecentAudio
from tests.speech_corpus import gap
from tests.test_speech_whole import assert_finals_are_whole_decodes, fresh_decode, stream_finals

RATE = 16000
GRAMMAR = """#JSGF V1.0;
grammar home;
public <command> = <water> | <lights> | <door> | <heat> | <volume> | <recording> | <question>;
<water> = set the water to (hot | cold | warm);
<lights> = turn (on | off) the (lights | fan);
<door> = (open | close) the (door | window);
<heat> = set the heat to (one | two | three | four | five | six | seven | eight | nine | ten);
<volume> = (raise | lower) the volume;
<recording> = (start | stop) recording;
<question> = what time is it;
"""
SEARCH = SphinxSearch(grammar=GRAMMAR, grammar_name="home")
# (espeak-ng voice, words a minute, pitch): -v, -s, -p
VOICES = {"plain": ("en-us", 175, 50), "slow": ("en-us", 140, 35),
          "fast": ("en-us", 210, 70), "f3": ("en-us+f3", 160, 60)}  # fmt: skip
SENTENCES = (
    ("slow", "set the water to cold"), ("slow", "open the door"),
    ("slow", "set the water to hot"), ("slow", "close the window"),
    ("plain", "set the water to warm"), ("plain", "turn on the lights"),
    ("plain", "set the heat to three"), ("plain", "stop recording"),
    ("fast", "set the water to cold"), ("fast", "turn off the lights"),
    ("fast", "set the heat to nine"), ("fast", "lower the volume"),
    ("f3", "close the door"), ("f3", "open the window"),
    ("f3", "what time is it"), ("f3", "raise the volume"),
)  # fmt: skip
GAP_S = 1.0


@dataclass(frozen=True)
class Sentence:
    text: str
    pcm: bytes  # its own file: espeak-ng's output at 16 kHz mono
    whole: str  # that file decoded whole by a fresh decoder
    start: float  # where it is in the stream
    end: float


@dataclass(frozen=True)
class Stream:
    pcm: bytes
    sentences: tuple[Sentence, ...]


def speak(text: str, voice: str, out: Path) -> bytes:
    """espeak-ng's recording of ``text`` as 16 kHz mono s16 (sox, repeatable dither)."""
    name, speed, pitch = VOICES[voice]
    raw = out.with_suffix(".espeak.wav")
    subprocess.run(
        ["espeak-ng", "-v", name, "-s", str(speed), "-p", str(pitch), "-w", str(raw), text],
        check=True,
    )
    subprocess.run(
        ["sox", "-R", str(raw), "-r", str(RATE), "-c", "1", "-b", "16",
         "-e", "signed-integer", str(out)],
        check=True,
    )  # fmt: skip
    with wave.open(str(out), "rb") as wav:
        return wav.readframes(wav.getnframes())


def build_stream(
    recordings: list[tuple[str, bytes]], gap_s: float = GAP_S, phase: int = 1
) -> Stream:
    """The recordings one after another, quiet room noise before, between and after;
    the first gap ``phase`` times 3 ms longer (where the endpointer's 30 ms frames
    fall in the speech: phase 1 is the one where the slow "cold" flips without a
    post-roll)."""
    parts = [gap(gap_s + phase * 0.003, sigma=3, seed=0)]
    at = len(parts[0]) // 2
    sentences = []
    for index, (text, pcm) in enumerate(recordings, start=1):
        whole = fresh_decode(SEARCH, pcm)
        sentences.append(Sentence(text, pcm, whole, at / RATE, (at + len(pcm) // 2) / RATE))
        parts += [pcm, gap(gap_s, sigma=3, seed=index)]
        at += (len(pcm) + len(parts[-1])) // 2
    return Stream(b"".join(parts), tuple(sentences))


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, bytes]]:
    directory = tmp_path_factory.mktemp("padding")
    return [
        (text, speak(text, voice, directory / f"{index}.wav"))
        for index, (voice, text) in enumerate(SENTENCES)
    ]


@pytest.fixture(scope="module")
def stream(recordings: list[tuple[str, bytes]]) -> Stream:
    return build_stream(recordings)


def heard(stream: Stream, finals: list[tuple[str, float, float]]) -> list[str]:
    """Each sentence's final ("" for none); fails if a final spans two sentences."""
    texts = [""] * len(stream.sentences)
    for text, start, end in finals:
        which = [i for i, s in enumerate(stream.sentences) if start < s.end and end > s.start]
        assert len(which) == 1, (text, start, end)
        assert not texts[which[0]], f"two finals for sentence {which[0]}"
        texts[which[0]] = text
    return texts


def run(stream: Stream, chunk_ms: int = 100, **pads: float) -> list[tuple[str, float, float]]:
    return [(t.text, t.start, t.end) for t in stream_finals(SEARCH, stream.pcm, chunk_ms, **pads)]


def test_the_recordings_decode_whole_to_their_words(stream: Stream) -> None:
    assert [s.whole for s in stream.sentences] == [text for _, text in SENTENCES]


@pytest.mark.parametrize("chunk_ms", [20, 100, 320])
def test_each_final_is_the_sentences_own_file_decoded_whole(stream: Stream, chunk_ms: int) -> None:
    finals = run(stream, chunk_ms)
    assert heard(stream, finals) == [s.whole for s in stream.sentences]
    assert_finals_are_whole_decodes(SEARCH, stream.pcm, finals)  # start/end: the audio decoded


@pytest.mark.parametrize("phase", [0, 4, 8])
def test_wherever_the_frames_fall(recordings: list[tuple[str, bytes]], phase: int) -> None:
    """Phase 4: a 0.1 s post-roll still gives "warm" (the measured lower edge)."""
    shifted = build_stream(recordings, phase=phase)
    assert heard(shifted, run(shifted)) == [s.whole for s in shifted.sentences]


def test_without_the_post_roll_a_near_word_flips(stream: Stream) -> None:
    texts = heard(stream, run(stream, pad_before_s=0, pad_after_s=0))
    assert texts[0] == "set the water to warm"  # its own file says "cold"
    assert texts != [s.whole for s in stream.sentences]


# -- the mechanics: where the decoded audio starts and ends -------------------------


def recognise(pcm: bytes, piece: int = 3200, **options: Any) -> list[Result]:
    recognizer = PocketSphinxRecognizer(SEARCH, partials=False, **options)
    results = [r for at in range(0, len(pcm), piece) for r in recognizer.feed(pcm[at : at + piece])]
    return results + recognizer.flush()


def test_speech_inside_a_post_roll_ends_it_there(recordings: list[tuple[str, bytes]]) -> None:
    """A 1 s post-roll and 0.5 s gaps: each next utterance starts inside the last one's
    post-roll, which stops there; spans abut and never overlap. (The endpointer
    names a start 0.27 s late: speech that starts inside a post-roll already decoded
    starts at its end. Not with a post-roll of 0.27 s or less: the endpointer ends an
    utterance 0.27 s after its ``speech_end`` and starts the next one no earlier.)"""
    short = build_stream(recordings[4:8], gap_s=0.5)
    finals = recognise(short.pcm, pad_after_s=1.0)
    assert len(finals) == 4
    for before, after in itertools.pairwise(finals):
        assert after.start == before.end
    default = recognise(short.pcm)  # 0.2 s: each post-roll whole, in the gap
    assert [r.text for r in default] == [s.whole for s in short.sentences]
    assert all(a.start > b.end for b, a in itertools.pairwise(default))
    assert_finals_are_whole_decodes(SEARCH, short.pcm, [(r.text, r.start, r.end) for r in finals])


def test_flush_ends_a_post_roll_with_the_stream(recordings: list[tuple[str, bytes]]) -> None:
    one = build_stream(recordings[:1], gap_s=0.6)
    recognizer = PocketSphinxRecognizer(SEARCH, partials=False, pad_after_s=5.0)
    assert recognizer.feed(one.pcm) == []  # the speech ended; its post-roll is not full
    [final] = recognizer.flush()
    assert (final.text, final.end) == (one.sentences[0].whole, len(one.pcm) / 2 / RATE)
    assert_finals_are_whole_decodes(SEARCH, one.pcm, [(final.text, final.start, final.end)])


def test_a_pre_roll_starts_the_audio_earlier(recordings: list[tuple[str, bytes]]) -> None:
    short = build_stream(recordings[4:7])
    bare = recognise(short.pcm, pad_before_s=0, pad_after_s=0)
    early = recognise(short.pcm, pad_before_s=0.25, pad_after_s=0)
    assert len(bare) == len(early) == 3
    for a, b in zip(bare, early, strict=True):
        assert b.start == pytest.approx(a.start - 0.25)
        assert b.end == a.end
    assert_finals_are_whole_decodes(SEARCH, short.pcm, [(r.text, r.start, r.end) for r in early])


def test_pieces_cut_at_the_cap_include_the_pads(recordings: list[tuple[str, bytes]]) -> None:
    """(Under this grammar most pieces of a sentence decode to nothing: no final.)"""
    one = build_stream(recordings[:2], gap_s=0.5)
    finals = recognise(one.pcm, max_utterance_s=1.0, pad_before_s=0.1, pad_after_s=0.3)
    assert finals
    assert all(r.end - r.start <= 1.0 + 1e-9 for r in finals)
    assert_finals_are_whole_decodes(SEARCH, one.pcm, [(r.text, r.start, r.end) for r in finals])


def test_negative_pads_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        PocketSphinxRecognizer(SEARCH, pad_after_s=-0.1)


def test_recent_audio_keeps_the_newest_by_position() -> None:
    recent = RecentAudio(keep_s=0.01)  # 160 samples, 320 bytes
    recent.add(bytes(range(200)))
    recent.add(bytes(200))
    assert (recent.start, recent.end) == (80, 400)
    assert recent.since(0) == (80, bytes(range(80, 200)) + bytes(200))
    assert recent.since(390) == (390, bytes(10))
    recent.clear()
    assert (recent.start, recent.end, recent.since(0)) == (0, 0, (0, b""))
