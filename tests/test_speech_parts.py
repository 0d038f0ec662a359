"""The speech node's pure parts, as tables: options, grammar and VAD mode, WAV
checks, continuity, the stream clock, the resampler, ``SpeechStream`` over a
scripted recogniser, and retries in one process (fed once, emitted once).

The node on real speech: ``tests/test_speech_recognition.py``.
"""

from __future__ import annotations

import io
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mediaflow.nodes.pocketsphinx_config import SphinxSearch, grammar_words, resolve_vad_mode
from mediaflow.nodes.pocketsphinx_engine import PocketSphinxRecognizer
from mediaflow.nodes.recognizer import RecognizerError, Result
from mediaflow.nodes.speech import SpeechNode, SpeechStream
from mediaflow.nodes.speech_audio import (
    AudioFormatError,
    Continuity,
    MonoResampler,
    StreamClock,
    WavChunk,
    continuity,
    read_wav,
)
from tests.speech_helpers import GRAMMAR, RATE, CountingRecognizer, FakeContext, wav_bytes

# -- options and grammar ------------------------------------------------------------


def test_engine_options_exclude_pocketsphinx_ones() -> None:
    with pytest.raises(ValueError, match="grammar configure pocketsphinx"):
        SpeechNode(grammar="g.gram", engine="x.y:Z")


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


async def test_a_grammar_path_is_relative_to_the_flow_and_a_missing_one_is_named(
    tmp_path: Path,
) -> None:
    (tmp_path / "grammar").mkdir()
    (tmp_path / "grammar" / "c.gram").write_text(GRAMMAR.read_text())
    ctx = FakeContext(tmp_path)
    try:
        found = SpeechNode(grammar="grammar/c.gram")
        await found.setup(ctx)  # type: ignore[arg-type]
        await found.teardown()
        missing = SpeechNode(grammar="grammar/none.gram")
        with pytest.raises(RecognizerError, match=r"speech node 'asr': cannot read grammar .*none"):
            await missing.setup(ctx)  # type: ignore[arg-type]
        await missing.teardown()
    finally:
        await ctx.services.close()


# -- pure parts: WAV checks, continuity, the clock, the resampler --------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not a wav at all", "not a readable WAV"),
        (wav_bytes(np.zeros(10, dtype=np.int16))[:-4], "truncated"),
        (b"", "not a readable WAV"),
    ],
)
def test_read_wav_refuses_what_it_cannot_hear(data: bytes, message: str) -> None:
    with pytest.raises(AudioFormatError, match=message):
        read_wav(data)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_read_wav_raises_only_its_own_error_on_damaged_files(data: st.DataObject) -> None:
    good = bytearray(wav_bytes(np.arange(-200, 200, dtype=np.int16).reshape(-1, 2), channels=2))
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
    chunk = wav_bytes(np.zeros(1600, dtype=np.int16))
    out = [t for n in range(4) for t in stream.push(chunk, 5.0 + n * 0.1)]
    assert [(t.text, t.start, t.end, t.final) for t in out] == [
        ("turn", 5.0, 5.1, False),
        ("turn on the lights", 5.0, 5.3, True),
        ("turn", 5.3, 5.4, False),  # a new utterance: the same words are news again
    ]


def test_stream_fills_a_hole_with_silence_and_restarts_on_a_rewind() -> None:
    script = _Script([])
    stream = SpeechStream(script)
    chunk = wav_bytes(np.zeros(1600, dtype=np.int16))
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
        chunk = wav_bytes(np.zeros(1600, dtype=np.int16))
        ctx.deliver(1, chunk, 0.0)
        ctx.fail_emits = 1
        with pytest.raises(ConnectionError):
            await node.run(ctx)  # type: ignore[arg-type]
        await node.run(ctx)  # type: ignore[arg-type]  # the engine's retry
        ctx.deliver(2, chunk, 0.1)
        await node.run(ctx)  # type: ignore[arg-type]
    finally:
        await node.teardown()
        await ctx.services.close()
    # 1600 samples heard once, not twice; each result emitted exactly once.
    assert ctx.emitted == [("text", "heard 1600"), ("text", "heard 3200")]
    assert [(e["text"], e["start"], e["end"]) for e in ctx.events] == [
        ("heard 1600", 0.0, 0.1),
        ("heard 3200", 0.0, 0.2),
    ]


def test_a_recogniser_that_raises_is_reset_and_the_retry_feeds_it_afresh() -> None:
    recognizer = CountingRecognizer(fail_once=True)
    stream = SpeechStream(recognizer)
    chunk = wav_bytes(np.zeros(1600, dtype=np.int16))
    with pytest.raises(RuntimeError, match="engine broke"):
        stream.push(chunk, None)
    assert recognizer.resets == 1
    (again,) = stream.push(chunk, None)  # counted time: the retry is not a hole
    assert (again.text, again.start, again.end) == ("heard 1600", 0.0, 0.1)
    (after,) = stream.push(chunk, None)
    assert (after.text, after.end) == ("heard 3200", 0.2)
