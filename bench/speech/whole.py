"""Finals decoded whole (``redecode``): what they cost, and what they are worth.

Run from the repository root, through ``bench.speech``::

    python -m bench.speech --redecode   # cost: CPU per audio second, longest call
    python -m bench.speech --wer        # accuracy: WER per corpus, side by side

**Cost.** The same audio through ``SpeechStream.push`` in 20 ms WAV chunks, one
child process per run, ``--reps`` runs (3) per row, median and range: the
streaming decoder alone (``redecode=False``: the old behaviour), streaming
partials plus the whole-utterance decode of each final (the default), and the
whole-utterance decode alone (``partials=False``). ``RTF`` is the thread's CPU
seconds per audio second; ``longest call`` is the longest single ``push``, which
is how long the event loop waits (pocketsphinx holds the GIL).

**Accuracy.** pocketsphinx's own test recordings (:mod:`tests.speech_corpus`,
downloaded once): each corpus is joined into one stream with 1 s of room noise
around each recording, decoded by the pipeline (``SpeechStream``, 100 ms chunks)
before (``redecode=False``) and after; a final belongs to the recording its
midpoint falls in. Beside them, pocketsphinx decoding each recording file whole
with a fresh decoder. Plus the espeak-ng sentences of the sample grammar.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._lib.common import Json, run_child
from bench.speech.audio import GRAMMAR, RATE, SENTENCES, make_audio, pcm_wav, speak
from bench.speech.wer import wer

VARIANTS = {
    "streaming only (before)": {"redecode": False, "partials": True},
    "streaming partials + whole finals (after)": {"redecode": True, "partials": True},
    "whole finals, no partials": {"redecode": True, "partials": False},
}


def _search(grammar: str | None) -> Any:
    from mediaflow.nodes.pocketsphinx_config import SphinxSearch

    return SphinxSearch(grammar=grammar) if grammar is not None else SphinxSearch()


def decode_stream(
    pcm: bytes, grammar: str | None, chunk_ms: int, **options: Any
) -> tuple[list[Any], float, float]:
    """(finals, thread CPU seconds, longest push in seconds) for ``pcm``."""
    from mediaflow.nodes.pocketsphinx_engine import PocketSphinxRecognizer
    from mediaflow.nodes.speech import SpeechStream

    recognizer = PocketSphinxRecognizer(_search(grammar), **options)
    stream = SpeechStream(recognizer, partials=bool(options.get("partials", True)))
    step = RATE * chunk_ms // 1000 * 2
    chunks = [pcm_wav(pcm[at : at + step], RATE) for at in range(0, len(pcm), step)]
    finals: list[Any] = []
    longest = 0.0
    cpu = time.thread_time()
    for index, chunk in enumerate(chunks):
        started = time.perf_counter()
        finals += [t for t in stream.push(chunk, index * chunk_ms / 1000) if t.final]
        longest = max(longest, time.perf_counter() - started)
    finals += stream.flush()
    return finals, time.thread_time() - cpu, longest


def child_cost(args: Json) -> Json:
    pcm = Path(args["pcm"]).read_bytes()
    finals, cpu, longest = decode_stream(pcm, args["grammar"], 20, **args["options"])
    audio_s = len(pcm) / 2 / RATE
    return {"rtf": cpu / audio_s, "longest_s": longest, "finals": len(finals)}


CHILDREN: dict[str, Callable[[Json], Json]] = {"cost": child_cost}


# -- cost -------------------------------------------------------------------------


def _audio_sets(tmp: Path, espeak_s: float) -> dict[str, tuple[Path, str | None]]:
    from tests.speech_corpus import join, load_corpus

    corpus = load_corpus()
    with wave.open(str(make_audio(tmp / "espeak.wav", espeak_s)), "rb") as wav:
        espeak = wav.readframes(wav.getnframes())
    sets = {
        "espeak-ng, sample grammar": (espeak, GRAMMAR.read_text()),
        "cards (human), cards.gram": (join(corpus.cards), corpus.cards_grammar),
        "librivox (human), default LM": (join(corpus.librivox), None),
    }
    out: dict[str, tuple[Path, str | None]] = {}
    for index, (name, (pcm, grammar)) in enumerate(sets.items()):
        path = tmp / f"set{index}.pcm"
        path.write_bytes(pcm)
        out[name] = (path, grammar)
    return out


def cost_report(reps: int, espeak_s: float) -> Json:
    rows: list[Json] = []
    with tempfile.TemporaryDirectory() as tmp:
        for audio, (path, grammar) in _audio_sets(Path(tmp), espeak_s).items():
            audio_s = path.stat().st_size / 2 / RATE
            for variant, options in VARIANTS.items():
                runs = []
                for _ in range(reps):
                    args = {"pcm": str(path), "grammar": grammar, "options": options}
                    run = run_child("bench.speech.whole", "cost", args, hard_timeout_s=900)
                    if run.result is None or run.error:
                        raise RuntimeError(f"cost {audio} {variant}: {run.error}\n{run.stderr}")
                    runs.append(run.result)
                    print(f"  {audio} | {variant}: {run.result}", file=sys.stderr)
                rtf = [r["rtf"] for r in runs]
                longest = [r["longest_s"] for r in runs]
                rows.append({
                    "audio": audio, "audio_s": audio_s, "variant": variant,
                    "rtf_median": statistics.median(rtf), "rtf_min": min(rtf), "rtf_max": max(rtf),
                    "longest_ms": statistics.median(longest) * 1000, "finals": runs[0]["finals"],
                })  # fmt: skip
    return {"reps": reps, "rows": rows}


def cost_table(report: Json) -> str:
    lines = [
        f"re-decode cost, 20 ms chunks, {report['reps']} runs each (median, min-max)",
        "",
        "| audio | variant | RTF (CPU s / audio s) | longest push (loop wait) | finals |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['audio']} ({row['audio_s']:.0f} s) | {row['variant']} "
            f"| {row['rtf_median']:.3f} ({row['rtf_min']:.3f}-{row['rtf_max']:.3f}) "
            f"| {row['longest_ms']:.0f} ms | {row['finals']} |"
        )
    return "\n".join(lines)


# -- accuracy -----------------------------------------------------------------------


def _fresh_whole(grammar: str | None, pcm: bytes) -> str:
    import importlib

    from mediaflow.nodes.pocketsphinx_config import sphinx_config

    search = _search(grammar)
    decoder = importlib.import_module("pocketsphinx").Decoder(**sphinx_config(search))
    if grammar is not None:
        decoder.add_jsgf_string(search.grammar_name, grammar)
        decoder.activate_search(search.grammar_name)
    decoder.start_utt()
    decoder.process_raw(pcm, full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return "" if hyp is None else str(hyp.hypstr).strip()


def _per_recording(finals: list[Any], spans: list[tuple[float, float]]) -> list[str]:
    texts: list[list[str]] = [[] for _ in spans]
    for final in finals:
        middle = (final.start + final.end) / 2
        for index, (start, end) in enumerate(spans):
            if start <= middle < end:
                texts[index].append(final.text)
    return [" ".join(t) for t in texts]


def wer_report() -> Json:
    from tests.speech_corpus import Recording, gap, load_corpus

    corpus = load_corpus()
    with tempfile.TemporaryDirectory() as tmp:
        espeak = [
            Recording(text, speak(text, Path(tmp) / f"e{index}"), text)
            for index, text in enumerate(SENTENCES)
        ]
    # Synthetic speech between digital silences (as espeak-ng pads it), recordings
    # between room noise (tests.speech_corpus.gap): noise next to espeak's
    # zero padding keeps the endpointer in speech.
    sets = {
        "espeak-ng, sample grammar": (espeak, GRAMMAR.read_text(), 0.0),
        "cards (human), cards.gram": (list(corpus.cards), corpus.cards_grammar, 30.0),
        "goforward (human), goforward.gram": ([corpus.goforward], corpus.goforward_grammar, 30.0),
        "librivox (human), default LM": (list(corpus.librivox), None, 30.0),
    }
    rows: list[Json] = []
    for name, (recordings, grammar, sigma) in sets.items():
        # The stream, and where each recording sits in it (join's layout).
        parts, spans, at = [gap(1.0, sigma=sigma, seed=0)], [], 1.0
        for index, recording in enumerate(recordings, start=1):
            length = len(recording.pcm) / 2 / RATE
            spans.append((at - 0.5, at + length + 0.5))
            parts += [recording.pcm, gap(1.0, sigma=sigma, seed=index)]
            at += length + 1.0
        pcm = b"".join(parts)
        refs = [r.reference for r in recordings]
        row: Json = {"corpus": name, "recordings": len(recordings)}
        row["words"] = sum(len(r.split()) for r in refs)
        for key, redecode in (("before", False), ("after", True)):
            finals, _, _ = decode_stream(pcm, grammar, 100, redecode=redecode, partials=False)
            row[key] = wer(zip(refs, _per_recording(finals, spans), strict=True))
            print(f"  {name} {key}: {_per_recording(finals, spans)}", file=sys.stderr)
        whole = [_fresh_whole(grammar, r.pcm) for r in recordings]
        row["whole"] = wer(zip(refs, whole, strict=True))
        print(f"  {name} whole files: {whole}", file=sys.stderr)
        rows.append(row)
    return {"rows": rows}


def wer_table(report: Json) -> str:
    lines = [
        "WER (word errors / reference words), one stream per corpus, 100 ms chunks",
        "",
        "| corpus | recordings (words) | pipeline before (streaming finals) "
        "| pipeline after (whole-utterance finals) | pocketsphinx, each file whole |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['corpus']} | {row['recordings']} ({row['words']}) "
            f"| {row['before']:.1%} | {row['after']:.1%} | {row['whole']:.1%} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import json

    from bench._lib.common import emit_result

    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        emit_result(CHILDREN[sys.argv[2]](json.loads(sys.argv[4])))
        sys.exit(0)
    sys.exit("run it through `python -m bench.speech --redecode` or `--wer`")
