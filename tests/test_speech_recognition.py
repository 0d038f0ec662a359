"""The speech node on real speech: espeak-ng sentences through a file microphone.

Flows run the real path (``connector = "microphone"`` → ``use = "speech"`` with the
sample JSGF grammar); a test source over :func:`devices.open_microphone` loses,
swaps or corrupts chunks; a recogniser restarted (or a process killed) mid-sentence
loses only that sentence. The pure parts (options, WAV checks, continuity, the
stream clock) are tables in ``tests/test_speech_parts.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mediaflow import FlowBuilder
from mediaflow.nodes.pocketsphinx_config import SphinxSearch
from mediaflow.nodes.pocketsphinx_engine import PocketSphinxRecognizer
from mediaflow.nodes.speech import SpeechStream, Transcript
from tests.speech_helpers import (
    GRAMMAR,
    RATE,
    REPO,
    SpeechRun,
    TamperedMic,
    Track,
    make_track,
    microphone_flow,
    read_samples,
    run_speech,
    wav_bytes,
)

TIME_SLACK_S = 0.5


@pytest.fixture(scope="module")
def track(tmp_path_factory: pytest.TempPathFactory) -> Track:
    return make_track(tmp_path_factory.mktemp("speech"))


def _run_microphone(track: Track, data: Path, chunk_ms: int) -> SpeechRun:
    flow = microphone_flow(f"speech{chunk_ms}", track.path, chunk_ms=chunk_ms)
    return asyncio.run(run_speech(flow, data, grammar=str(GRAMMAR)))


@pytest.fixture(scope="module")
def mic20(track: Track, tmp_path_factory: pytest.TempPathFactory) -> SpeechRun:
    return _run_microphone(track, tmp_path_factory.mktemp("data20"), 20)


@pytest.fixture(scope="module")
def mic100(track: Track, tmp_path_factory: pytest.TempPathFactory) -> SpeechRun:
    return _run_microphone(track, tmp_path_factory.mktemp("data100"), 100)


# -- real speech through the microphone connector ---------------------------------


def test_20_ms_chunks_give_back_each_spoken_sentence(mic20: SpeechRun, track: Track) -> None:
    assert mic20.texts == track.texts
    assert not mic20.dropped


def test_100_ms_chunks_give_back_each_spoken_sentence(mic100: SpeechRun, track: Track) -> None:
    assert mic100.texts == track.texts
    assert not mic100.dropped


def test_20_and_100_ms_runs_agree_on_words_and_times(mic20: SpeechRun, mic100: SpeechRun) -> None:
    assert [(t["text"], t["start"], t["end"]) for t in mic20.finals] == [
        (t["text"], t["start"], t["end"]) for t in mic100.finals
    ]


def test_transcript_times_bracket_each_sentence(mic20: SpeechRun, track: Track) -> None:
    assert [t["text"] for t in mic20.finals] == track.texts
    for event, spoken in zip(mic20.finals, track.sentences, strict=True):
        assert (event["node"], event["port"]) == ("asr", "text")
        assert abs(event["start"] - spoken.start) <= TIME_SLACK_S, (event, spoken)
        assert abs(event["end"] - spoken.end) <= TIME_SLACK_S, (event, spoken)
        assert event["start"] <= spoken.start + 0.1 and event["end"] >= spoken.end - 0.1


def test_final_transcripts_are_on_the_timeline_in_wall_clock_time(mic20: SpeechRun) -> None:
    """Each final is noted once, its stream times moved onto the capture clock."""
    assert [(n.node, n.event.type, n.event.source) for n in mic20.noted] == [
        ("asr", "transcript", "mic")
    ] * len(mic20.finals)
    offset = mic20.chunk_meta["captured_at"] - mic20.chunk_meta["pts"]
    for noted, final in zip(mic20.noted, mic20.finals, strict=True):
        assert noted.event.text == final["text"]
        assert noted.event.start == pytest.approx(final["start"] + offset, abs=0.05)
        assert noted.event.end == pytest.approx(final["end"] + offset, abs=0.05)


def test_partials_appear_while_speaking_and_only_when_they_change(
    mic20: SpeechRun, track: Track
) -> None:
    assert mic20.partials
    partial_events = [t for t in mic20.transcripts if not t["final"]]
    assert [t["text"] for t in partial_events] == mic20.partials
    assert {t["port"] for t in partial_events} == {"partial"}
    # Every sentence had hypotheses before its final, inside its time span.
    for final, spoken in zip(mic20.finals, track.sentences, strict=True):
        during = [p for p in partial_events if final["start"] == p["start"]]
        assert during, f"no partial for {spoken.text!r}"
        assert all(p["end"] <= final["end"] for p in during)
        assert any(p["text"] != spoken.text for p in during)  # heard before it was all said
    # Within an utterance, a hypothesis is emitted only when it changed.
    for a, b in itertools.pairwise(partial_events):
        assert a["start"] != b["start"] or a["text"] != b["text"]


async def test_44k_stereo_is_resampled_and_recognised(tmp_path: Path) -> None:
    track = make_track(tmp_path, rate=44100, channels=2, name="stereo")
    assert read_samples(track.path).shape[1] == 2
    flow = microphone_flow("stereo", track.path, chunk_ms=20, rate=44100, channels=2)
    run = await run_speech(flow, tmp_path / "data", grammar=str(GRAMMAR))
    assert run.chunk_meta["rate"] == 44100 and run.chunk_meta["channels"] == 2
    assert run.texts == track.texts
    for event, spoken in zip(run.finals, track.sentences, strict=True):
        assert abs(event["start"] - spoken.start) <= TIME_SLACK_S
        assert abs(event["end"] - spoken.end) <= TIME_SLACK_S


# -- the check can fail: lost or reordered chunks change the words ------------------


# Where damage shows. With a sentence grammar the decoder is robust: a few 20 ms
# chunks lost or swapped anywhere still give the right sentence (measured: up to 5
# lost, any number of adjacent swaps). What it cannot survive is losing or
# scrambling the vowel that tells "start" from "stop", ~0.2 s into "start recording":
# two 100 ms chunks there, or eight 20 ms ones.
TAMPERING = {
    "drop 2 x 100 ms": (100, 0.25, {"drop": [0, 1]}),
    "swap 2 pairs of 100 ms": (100, 0.25, {"swap": [0, 2]}),
    "drop 8 x 20 ms": (20, 0.2, {"drop": list(range(8))}),
}


@pytest.mark.parametrize("tamper", list(TAMPERING))
async def test_lost_or_swapped_chunks_mid_sentence_change_the_result(
    tmp_path: Path, track: Track, tamper: str
) -> None:
    """The exact-sentence check can fail: damage in the middle of a sentence shows."""
    chunk_ms, into, where = TAMPERING[tamper]
    at = round((track.sentences[1].start + into) * 1000) // chunk_ms
    options: dict[str, Any] = {how: [at + n for n in offsets] for how, offsets in where.items()}
    flow = FlowBuilder("tampered").add(
        "src", TamperedMic, path=str(track.path), chunk_ms=chunk_ms, **options
    )
    run = await run_speech(flow, tmp_path, source="src", grammar=str(GRAMMAR))
    assert run.texts != track.texts
    # The damage is local: the sentences around it are intact.
    assert run.texts[0] == track.texts[0] and run.texts[-2:] == track.texts[-2:]


@pytest.mark.parametrize("chunk_ms", [20, 100])
async def test_untampered_test_source_gives_the_sentences(
    tmp_path: Path, track: Track, chunk_ms: int
) -> None:
    """The control for the test above: the same source node, nothing lost."""
    flow = FlowBuilder("clean").add("src", TamperedMic, path=str(track.path), chunk_ms=chunk_ms)
    run = await run_speech(flow, tmp_path, source="src", grammar=str(GRAMMAR))
    assert run.texts == track.texts


async def test_corrupt_and_non_wav_chunks_are_dead_lettered_naming_node_and_seq(
    tmp_path: Path, track: Track
) -> None:
    # Both in the silence after a sentence, so the words around them are intact.
    corrupt = int((track.sentences[0].end + 0.2) * 1000) // 100
    mistyped = int((track.sentences[2].end + 0.2) * 1000) // 100
    flow = FlowBuilder("corrupt").add(
        "src", TamperedMic, path=str(track.path), chunk_ms=100,
        corrupt=[corrupt], mistype=[mistyped],
    )  # fmt: skip
    run = await run_speech(flow, tmp_path, source="src", grammar=str(GRAMMAR))
    assert [d["node"] for d in run.dropped] == ["asr", "asr"]
    reasons = [d["reason"] for d in run.dropped]
    assert reasons[0].startswith(
        f"SpeechInputError: speech node 'asr': chunk seq {corrupt} is unreadable: "
        "not a readable WAV file"
    )
    assert reasons[1] == (
        f"SpeechInputError: speech node 'asr': chunk seq {mistyped} is audio/ogg, "
        "expected audio/wav"
    )
    assert run.texts == track.texts  # each hole is heard as silence


# -- a plug-in engine ---------------------------------------------------------------


async def test_an_engine_plugs_in_and_its_times_follow_the_stream(
    tmp_path: Path, track: Track
) -> None:
    flow = microphone_flow("engine", track.path, chunk_ms=100)
    run = await run_speech(
        flow,
        tmp_path,
        engine="tests.speech_helpers:ScriptedRecognizer",
        engine_options={"every": 1.0},
    )
    whole_seconds = int(track.duration)
    assert run.texts == [f"chunk {n}" for n in range(1, whole_seconds + 1)]
    assert [(t["start"], t["end"]) for t in run.finals][:3] == [(0, 1), (1, 2), (2, 3)]


# -- a recogniser restarted mid-sentence (what a crash does) -------------------------


def _stream_from(track: Track, start_s: float, chunk_ms: int = 100) -> list[Transcript]:
    samples = read_samples(track.path)[:, 0]
    stream = SpeechStream(
        PocketSphinxRecognizer(SphinxSearch(grammar=GRAMMAR.read_text())), partials=False
    )
    step = RATE * chunk_ms // 1000
    out: list[Transcript] = []
    for at in range(round(start_s * RATE), len(samples), step):
        out += stream.push(wav_bytes(samples[at : at + step]), at / RATE)
    return out


def test_a_recogniser_restarted_mid_sentence_loses_only_that_sentence(track: Track) -> None:
    """What a crash does (see the speech module doc): the new process hears the
    stream from the first redelivered chunk on."""
    second = track.sentences[1]
    middle = round((second.start + second.end) / 2, 1)
    heard = _stream_from(track, middle)
    assert [t.text for t in heard if t.start > second.end] == track.texts[2:]
    assert all(t.text != second.text for t in heard)
    assert heard[-1].start >= track.sentences[-1].start - TIME_SLACK_S  # stream clock kept


def test_a_crash_mid_sentence_loses_only_the_start_of_that_sentence(
    tmp_path: Path, track: Track
) -> None:
    """A real crash (``os._exit`` right after a chunk's results were emitted, before
    its ack) in the middle of the second sentence, then a resumed run in a new
    process: what the speech module doc promises."""
    second = track.sentences[1]
    die_after = round((second.start + second.end) / 2 * 10)  # a 100 ms chunk mid-sentence
    out, data = tmp_path / "texts.txt", tmp_path / "data"

    def run(die: int | None) -> int:
        code = (
            "import sys; from tests.speech_helpers import run_crash_flow; "
            "run_crash_flow(*sys.argv[1:4], int(sys.argv[4]) if sys.argv[4] != '-' else None)"
        )
        args = [str(track.path), str(data), str(out), "-" if die is None else str(die)]
        return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, timeout=120).returncode

    assert run(die_after) == 3  # died where told
    assert out.read_text().splitlines() == track.texts[:1]  # finished before the crash
    assert run(None) == 0  # resumed: the unacked chunks are redelivered
    texts = out.read_text().splitlines()
    assert texts[0] == track.texts[0] and texts[-2:] == track.texts[-2:]
    assert second.text not in texts  # its first words went with the dead process


# -- keyphrase spotting -------------------------------------------------------------


def test_keyphrase_spotting_finds_the_phrase(track: Track) -> None:
    # Spotting is weak on espeak's voice: of the track's four sentences only this one
    # is found (at 1e-40); it is found once, and nothing else is taken for it.
    samples = read_samples(track.path)[:, 0]
    recognizer = PocketSphinxRecognizer(
        SphinxSearch(keyphrase="open the door", kws_threshold=1e-40), partials=False
    )
    stream = SpeechStream(recognizer, partials=False)
    step = RATE // 10
    heard = []
    for at in range(0, len(samples), step):
        heard += stream.push(wav_bytes(samples[at : at + step]), at / RATE)
    assert [t.text for t in heard] == ["open the door"]
    assert abs(heard[0].start - track.sentences[3].start) <= TIME_SLACK_S


def test_a_stream_ending_mid_utterance_on_a_frame_boundary_keeps_its_final(
    track: Track,
) -> None:
    # pocketsphinx's Endpointer.end_stream raises IndexError on an empty buffer; a
    # stream whose last chunk ended exactly on a frame boundary inside an utterance
    # used to lose that utterance's final there.
    samples = read_samples(track.path)[:, 0]
    spoken = track.sentences[0]
    recognizer = PocketSphinxRecognizer(SphinxSearch(grammar=GRAMMAR.read_text()))
    frame = recognizer._frame_bytes // 2  # samples per endpointer frame
    cut = int(spoken.end * RATE) // frame * frame  # inside the sentence, frame-aligned
    heard = recognizer.feed(samples[:cut].tobytes())
    assert all(not r.final for r in heard)  # still in the utterance when the stream ends
    finals = [r for r in recognizer.flush() if r.final]
    assert len(finals) == 1 and finals[0].text
    assert abs(finals[0].start - spoken.start) <= TIME_SLACK_S
