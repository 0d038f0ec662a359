"""The speech node on real speech: espeak-ng sentences through a file microphone.

Flows run the real path (``connector = "microphone"`` → ``use = "speech"`` with the
sample JSGF grammar); a test source over :func:`devices.open_microphone` loses,
swaps or corrupts chunks. The pure parts (options, WAV checks, continuity, the
stream clock) are tables.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import subprocess
import sys
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mediaflow import FlowBuilder
from mediaflow.nodes.recognizer import (
    PocketSphinxRecognizer,
    RecognizerError,
    Result,
    SphinxSearch,
    grammar_words,
    resolve_vad_mode,
)
from mediaflow.nodes.speech import SpeechNode, SpeechStream, Transcript
from mediaflow.nodes.speech_audio import (
    AudioFormatError,
    Continuity,
    MonoResampler,
    StreamClock,
    WavChunk,
    continuity,
    read_wav,
)
from tests.speech_helpers import (
    GRAMMAR,
    RATE,
    REPO,
    CountingRecognizer,
    FakeContext,
    SpeechRun,
    TamperedMic,
    Track,
    make_track,
    microphone_flow,
    read_samples,
    run_speech,
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


def test_engine_options_exclude_pocketsphinx_ones() -> None:
    with pytest.raises(ValueError, match="grammar configure pocketsphinx"):
        SpeechNode(grammar="g.gram", engine="x.y:Z")


# -- a recogniser restarted mid-sentence (what a crash does) -------------------------


def _wav(samples: np.ndarray, rate: int = RATE, channels: int = 1) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(np.ascontiguousarray(samples, dtype="<i2").tobytes())
    return buffer.getvalue()


def _stream_from(track: Track, start_s: float, chunk_ms: int = 100) -> list[Transcript]:
    samples = read_samples(track.path)[:, 0]
    stream = SpeechStream(
        PocketSphinxRecognizer(SphinxSearch(grammar=GRAMMAR.read_text())), partials=False
    )
    step = RATE * chunk_ms // 1000
    out: list[Transcript] = []
    for at in range(round(start_s * RATE), len(samples), step):
        out += stream.push(_wav(samples[at : at + step]), at / RATE)
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


# -- options, grammar and keyphrase ---------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"grammar": "a.gram", "lm": "b.lm"}, r"at most one of grammar, keyphrase, lm"),
        ({"kws_threshold": 1e-10}, "kws_threshold needs a keyphrase"),
        ({"engine": "m:C", "model": "x"}, "model configure pocketsphinx"),
        ({"engine_options": {"a": 1}}, "engine_options needs an engine"),
        ({"vad_mode": 9}, "vad_mode must be one of"),
    ],
)
def test_contradictory_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpeechNode(**options)


@pytest.mark.parametrize(
    ("value", "expected"), [("loose", 0), ("STRICT", 3), (2, 2), ("medium_loose", 1)]
)
def test_vad_mode_takes_names_and_numbers(value: int | str, expected: int) -> None:
    assert resolve_vad_mode(value) == expected


@pytest.mark.parametrize("value", [4, -1, "loud", True])
def test_vad_mode_refuses_the_rest(value: int | str) -> None:
    with pytest.raises(ValueError, match="vad_mode must be one of"):
        resolve_vad_mode(value)


def test_grammar_words_are_the_rule_words() -> None:
    assert grammar_words(GRAMMAR.read_text()) == {
        "turn", "on", "off", "the", "lights", "start", "stop", "recording",
        "what", "time", "is", "it", "open", "close", "door",
    }  # fmt: skip


def test_a_grammar_with_unknown_words_names_them() -> None:
    grammar = "#JSGF V1.0;\ngrammar g;\npublic <a> = open the zorblax | frobnicate;\n"
    with pytest.raises(RecognizerError, match="missing from the dictionary: frobnicate, zorblax"):
        PocketSphinxRecognizer(SphinxSearch(grammar=grammar))


class _SetupContext:
    """The two things ``SpeechNode.setup`` reads from its context."""

    def __init__(self, flow_dir: Path) -> None:
        self.node = "asr"
        self.flow_dir = flow_dir


async def test_a_grammar_path_is_relative_to_the_flow_and_a_missing_one_is_named(
    tmp_path: Path,
) -> None:
    (tmp_path / "grammar").mkdir()
    (tmp_path / "grammar" / "c.gram").write_text(GRAMMAR.read_text())
    found = SpeechNode(grammar="grammar/c.gram")
    await found.setup(_SetupContext(tmp_path))  # type: ignore[arg-type]
    await found.teardown()
    missing = SpeechNode(grammar="grammar/none.gram")
    with pytest.raises(RecognizerError, match=r"speech node 'asr': cannot read grammar .*none"):
        await missing.setup(_SetupContext(tmp_path))  # type: ignore[arg-type]
    await missing.teardown()


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
        heard += stream.push(_wav(samples[at : at + step]), at / RATE)
    assert [t.text for t in heard] == ["open the door"]
    assert abs(heard[0].start - track.sentences[3].start) <= TIME_SLACK_S


# -- pure parts: WAV checks, continuity, the clock, the resampler --------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not a wav at all", "not a readable WAV"),
        (_wav(np.zeros(10, dtype=np.int16))[:-4], "truncated"),
        (b"", "not a readable WAV"),
    ],
)
def test_read_wav_refuses_what_it_cannot_hear(data: bytes, message: str) -> None:
    with pytest.raises(AudioFormatError, match=message):
        read_wav(data)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_read_wav_raises_only_its_own_error_on_damaged_files(data: st.DataObject) -> None:
    good = bytearray(_wav(np.arange(-200, 200, dtype=np.int16).reshape(-1, 2), channels=2))
    for _ in range(data.draw(st.integers(1, 4))):
        good[data.draw(st.integers(0, len(good) - 1))] = data.draw(st.integers(0, 255))
    damaged = bytes(good[: data.draw(st.integers(0, len(good)))])
    try:
        chunk = read_wav(damaged)
    except AudioFormatError:
        return
    assert len(chunk.pcm) == chunk.frames * 2 * chunk.channels


def test_read_wav_refuses_8_bit() -> None:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(8000)
        out.writeframes(b"\x80" * 80)
    with pytest.raises(AudioFormatError, match="expected 16-bit PCM, got 8-bit"):
        read_wav(buffer.getvalue())


@pytest.mark.parametrize(
    ("expected", "pts", "result"),
    [
        (None, 0.0, Continuity.FIRST),
        (None, None, Continuity.FIRST),
        (1.0, 1.0, Continuity.FOLLOWS),
        (1.0, 1.005, Continuity.FOLLOWS),
        (1.0, None, Continuity.FOLLOWS),
        (1.0, 1.1, Continuity.GAP),
        (1.0, 0.9, Continuity.REWIND),
    ],
)
def test_continuity(expected: float | None, pts: float | None, result: Continuity) -> None:
    assert continuity(expected, pts) is result


def test_the_clock_maps_recogniser_time_across_a_hole() -> None:
    clock = StreamClock()
    clock.add(10.0, 1600, 0.1)  # recogniser 0.0-0.1 is stream 10.0-10.1
    clock.add(10.1, 1600, 0.1)
    clock.add(15.0, 1600, 0.1)  # a hole: recogniser 0.2 is stream 15.0
    assert clock.to_stream(0.05) == pytest.approx(10.05)
    assert clock.to_stream(0.15) == pytest.approx(10.15)
    assert clock.to_stream(0.25) == pytest.approx(15.05)
    assert clock.expected == pytest.approx(15.1)
    clock.forget_before(0.25)
    assert clock.to_stream(0.0) == pytest.approx(15.0)  # clamped to what is kept


def test_the_clock_counts_when_chunks_have_no_pts() -> None:
    clock = StreamClock()
    for _ in range(3):
        clock.add(None, 320, 0.02)
    assert clock.to_stream(0.05) == pytest.approx(0.05)
    assert clock.expected == pytest.approx(0.06)


def test_the_clock_keeps_a_bounded_number_of_anchors() -> None:
    clock = StreamClock(keep_s=1.0)
    for n in range(1000):
        clock.add(n * 0.02, 320, 0.02)
    assert clock.to_stream(0.0) == pytest.approx(19.0, abs=0.03)  # older anchors gone


def test_the_resampler_keeps_state_across_chunks_and_formats() -> None:
    resampler = MonoResampler()
    tone = (np.sin(np.arange(44100) * 2 * np.pi * 440 / 44100) * 8000).astype(np.int16)
    stereo = np.repeat(tone[:, None], 2, axis=1)
    out = b"".join(
        resampler.convert(WavChunk(stereo[i : i + 882].tobytes(), 44100, 2))
        for i in range(0, 44100, 882)
    )
    assert abs(len(out) // 2 - RATE) <= 64  # one second, less the filter's delay
    passthrough = np.arange(320, dtype=np.int16).tobytes()
    again = resampler.convert(WavChunk(passthrough, RATE, 1))
    assert again.endswith(passthrough)  # 16 kHz mono is not touched


class _Script:
    """A recogniser that returns a scripted list per feed and records what it heard."""

    def __init__(self, script: list[list[Result]]) -> None:
        self.script = script
        self.heard: list[int] = []

    def feed(self, pcm16k: bytes) -> list[Result]:
        self.heard.append(len(pcm16k) // 2)
        return self.script.pop(0) if self.script else []

    def flush(self) -> list[Result]:
        return [Result("flushed", 0.0, 0.01, final=True)]

    def reset(self) -> None:
        pass


def test_stream_drops_repeated_partials_and_maps_times() -> None:
    script = _Script(
        [
            [Result("turn", 0.0, 0.1, final=False)],
            [Result("turn", 0.0, 0.2, final=False)],
            [Result("turn on the lights", 0.0, 0.3, final=True)],
            [Result("turn", 0.3, 0.4, final=False)],
        ]
    )
    stream = SpeechStream(script)
    chunk = _wav(np.zeros(1600, dtype=np.int16))
    out = [t for n in range(4) for t in stream.push(chunk, 5.0 + n * 0.1)]
    assert [(t.text, t.start, t.end, t.final) for t in out] == [
        ("turn", 5.0, 5.1, False),
        ("turn on the lights", 5.0, 5.3, True),
        ("turn", 5.3, 5.4, False),  # a new utterance: the same words are news again
    ]


def test_stream_fills_a_hole_with_silence_and_restarts_on_a_rewind() -> None:
    script = _Script([])
    stream = SpeechStream(script)
    chunk = _wav(np.zeros(1600, dtype=np.int16))
    stream.push(chunk, 0.0)
    stream.push(chunk, 0.35)  # 0.25 s missing
    assert script.heard == [1600, 4000, 1600]
    out = stream.push(chunk, 0.2)  # back in time: the utterance is finished first
    assert [t.text for t in out] == ["flushed"]
    stream.push(chunk, 10.0)  # a long hole: at most 1 s of silence
    assert script.heard[-2:] == [RATE, 1600]


# -- retries in this process: fed once, emitted once ----------------------------------


async def test_a_chunk_retried_after_a_failed_emit_is_not_fed_again(tmp_path: Path) -> None:
    node = SpeechNode(engine="tests.speech_helpers:CountingRecognizer")
    ctx = FakeContext(tmp_path)
    await node.setup(ctx)  # type: ignore[arg-type]
    try:
        chunk = _wav(np.zeros(1600, dtype=np.int16))
        ctx.deliver(1, chunk, 0.0)
        ctx.fail_emits = 1
        with pytest.raises(ConnectionError):
            await node.run(ctx)  # type: ignore[arg-type]
        await node.run(ctx)  # type: ignore[arg-type]  # the engine's retry
        ctx.deliver(2, chunk, 0.1)
        await node.run(ctx)  # type: ignore[arg-type]
    finally:
        await node.teardown()
    # 1600 samples heard once, not twice; each result emitted exactly once.
    assert ctx.emitted == [("text", "heard 1600"), ("text", "heard 3200")]
    assert [(e["text"], e["start"], e["end"]) for e in ctx.events] == [
        ("heard 1600", 0.0, 0.1),
        ("heard 3200", 0.0, 0.2),
    ]


def test_a_recogniser_that_raises_is_reset_and_the_retry_feeds_it_afresh() -> None:
    recognizer = CountingRecognizer(fail_once=True)
    stream = SpeechStream(recognizer)
    chunk = _wav(np.zeros(1600, dtype=np.int16))
    with pytest.raises(RuntimeError, match="engine broke"):
        stream.push(chunk, None)
    assert recognizer.resets == 1
    (again,) = stream.push(chunk, None)  # counted time: the retry is not a hole
    assert (again.text, again.start, again.end) == ("heard 1600", 0.0, 0.1)
    (after,) = stream.push(chunk, None)
    assert (after.text, after.end) == ("heard 3200", 0.2)


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
