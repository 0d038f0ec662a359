"""Voice detection for the Whisper engine: the pure utterance finder, and Silero streamed.

:class:`UtteranceFinder` is driven with made-up window probabilities (each
window is 512 samples, 32 ms); :class:`SileroVad` with real recordings.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mediaflow.nodes.voice_activity import (
    WINDOW,
    SileroVad,
    Utterance,
    UtteranceFinder,
    VoiceSettings,
)
from tests.speech_corpus import Corpus, gap, load_corpus

PAD = 0.4
PAD_SAMPLES = round(PAD * 16000)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus()


def windows(*runs: tuple[int, float]) -> list[float]:
    """``(count, probability)`` runs as one list of window probabilities."""
    return [p for count, p in runs for _ in range(count)]


def find(probabilities: list[float], settings: VoiceSettings | None = None) -> list[Utterance]:
    finder = UtteranceFinder(settings or VoiceSettings(pad_s=PAD))
    found = [u for p in probabilities for u in finder.push(p)]
    last = finder.finish()
    return found + ([last] if last is not None else [])


def spans(probabilities: list[float], settings: VoiceSettings | None = None) -> list[Utterance]:
    return [Utterance(u.start, u.end) for u in find(probabilities, settings)]


def test_speech_between_silences_is_one_padded_utterance() -> None:
    found = find(windows((50, 0.01), (60, 0.95), (40, 0.01)))
    assert found == [Utterance(50 * WINDOW - PAD_SAMPLES, 110 * WINDOW + PAD_SAMPLES, 60 * 0.032)]


def test_an_utterance_ends_only_after_min_silence() -> None:
    # 0.6 s of quiet ends it; 0.5 s (15 windows) does not: one utterance, not two.
    found = find(windows((20, 0.0), (30, 0.9), (15, 0.0), (30, 0.9), (40, 0.0)))
    assert len(found) == 1
    assert found[0].end == 95 * WINDOW + PAD_SAMPLES


def test_hysteresis_keeps_a_quieter_stretch_inside_the_utterance() -> None:
    # 0.4 is under the start threshold (0.5) but over the end one (0.35).
    found = spans(windows((20, 0.0), (10, 0.9), (40, 0.4), (10, 0.9), (40, 0.0)))
    assert found == [Utterance(20 * WINDOW - PAD_SAMPLES, 80 * WINDOW + PAD_SAMPLES)]


@pytest.mark.parametrize("blip", [1, 4, 7])
def test_a_blip_shorter_than_min_speech_is_not_an_utterance(blip: int) -> None:
    # min_speech_s = 0.25 s is 8 windows above the threshold.
    assert find(windows((30, 0.0), (blip, 0.99), (60, 0.0)) * 5) == []


def test_scattered_windows_over_the_threshold_are_not_speech() -> None:
    # What pink noise does to Silero: a window over 0.5 now and then, never 8 of them
    # before 0.6 s of quiet.
    noise = windows((25, 0.1), (1, 0.7)) * 200
    assert find(noise) == []


def test_an_utterance_counts_its_sure_speech() -> None:
    # Noise that stays over the threshold without ever being sure makes an
    # utterance with no sure speech, which the engine never decodes.
    (noise,) = find(windows((30, 0.0), (40, 0.62), (40, 0.0)))
    assert noise.sure_s == 0
    (speech,) = find(windows((30, 0.0), (5, 0.6), (20, 0.97), (5, 0.6), (40, 0.0)))
    assert speech.sure_s == pytest.approx(20 * 0.032)


def test_the_start_is_clamped_at_the_stream_start() -> None:
    found = find(windows((2, 0.0), (20, 0.9), (30, 0.0)))
    assert found[0].start == 0


def test_long_talk_is_cut_at_its_quietest_moment() -> None:
    # 7 s of talk with pauses too short to end it (0.3 s), one of them deeper.
    settings = VoiceSettings(pad_s=PAD, max_utterance_s=6.0)
    talk = windows((30, 0.9), (10, 0.3)) * 3 + windows((30, 0.9), (10, 0.05)) + windows((60, 0.9))
    found = find(windows((10, 0.0)) + talk + windows((40, 0.0)), settings)
    assert len(found) == 2
    first, second = found
    # The cut is inside the deep pause (windows 160-169), not in speech nor in the
    # shallower pauses before it.
    assert 160 * WINDOW <= first.end <= 170 * WINDOW
    assert second.start == first.end
    assert first.end - first.start <= 6.0 * 16000


def test_talk_without_any_pause_is_still_cut_at_the_longest() -> None:
    settings = VoiceSettings(pad_s=PAD, max_utterance_s=3.0)
    found = find(windows((10, 0.0), (300, 0.9), (40, 0.0)), settings)
    assert len(found) >= 3
    assert all(u.end - u.start <= 3.0 * 16000 for u in found)
    assert all(a.end == b.start for a, b in itertools.pairwise(found))


def test_keep_from_covers_an_utterance_not_yet_confirmed() -> None:
    finder = UtteranceFinder(VoiceSettings(pad_s=PAD))
    for p in windows((100, 0.0), (3, 0.9)):  # speech began 3 windows ago: not yet sure
        assert list(finder.push(p)) == []
    assert finder.start is None
    assert finder.keep_from == 100 * WINDOW - PAD_SAMPLES
    for p in windows((10, 0.9)):
        list(finder.push(p))
    assert finder.start == 100 * WINDOW - PAD_SAMPLES == finder.keep_from


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threshold": 1.5}, "vad_threshold must be between 0 and 1"),
        ({"pad_s": 0.8, "min_silence_s": 0.5}, "min_silence_s must be at least pad_s"),
        ({"max_utterance_s": 1.0}, "max_utterance_s must be at least"),
    ],
)
def test_bad_settings_are_refused(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VoiceSettings(**options)


# -- Silero, streamed ----------------------------------------------------------------


def score_in_chunks(pcm: bytes, chunk_samples: int) -> list[float]:
    vad = SileroVad()
    step = 2 * chunk_samples
    return [p for at in range(0, len(pcm), step) for p in vad.score(pcm[at : at + step])]


@pytest.mark.parametrize("chunk_ms", [20, 37, 100, 320])
def test_silero_streamed_in_chunks_scores_as_the_whole_recording(
    corpus: Corpus, chunk_ms: int
) -> None:
    pcm = gap(0.5) + corpus.librivox[1].pcm + gap(0.5)
    whole = score_in_chunks(pcm, len(pcm))
    chunked = score_in_chunks(pcm, 16 * chunk_ms)
    assert len(chunked) == len(whole) == len(pcm) // 2 // WINDOW
    assert np.allclose(chunked, whole, atol=1e-3)
    assert max(whole) > 0.9  # it heard the speech
    assert find(whole) != []


def test_silero_hears_no_speech_in_room_noise() -> None:
    probabilities = score_in_chunks(gap(20.0, seed=7), 1600)
    assert max(probabilities) < 0.5
    assert find(probabilities) == []


def test_reset_forgets_the_stream() -> None:
    tone = (np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000) * 8000).astype("<i2").tobytes()
    vad = SileroVad()
    first = vad.score(tone)
    vad.reset()
    assert vad.score(tone) == first
