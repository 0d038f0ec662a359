"""What speech recognition costs, and how many 16 kHz microphones with speech nodes
keep up in real time on this machine.

Run from the repository root (a few minutes; needs espeak-ng and sox)::

    python -m bench.speech                  # the table
    python -m bench.speech --json           # the numbers as JSON on stdout
    python -m bench.speech --skip lm,flow   # grammar decoding only
    python -m bench.speech --redecode       # finals decoded whole: the cost
    python -m bench.speech --wer            # ... and the accuracy (bench/speech/whole.py)
    python -m bench.speech --overhead       # pipeline / bare recogniser (bench/speech/overhead.py)
    python -m bench.speech --engines        # both engines side by side (bench/speech/engines.py)

The audio is espeak-ng (``-v en-us``) speaking the sample grammar's sentences
with 0.6 s of silence between them, 16 kHz mono. Every measurement runs in a
child process of its own (see :mod:`bench._lib.common`).

1. **RTF per stream**: CPU seconds of the node's work (``SpeechStream.push`` on
   20 ms WAV chunks: parse, endpointer, decoder) per second of audio, with the
   sample JSGF grammar and with pocketsphinx's default language model.
2. **GIL**: two threads decode at once, each its own stream; speedup over one
   thread (2.0 = the GIL is released, 1.0 or less = it is held). Plus the event
   loop's lag (a 1 ms ticker) while the node's thread decodes, as the node does.
3. **decoder capacity**: K streams decode concurrently as fast as they can, in
   K threads of one process, or in 2 processes (one per core) of K/2 threads.
   Wall time / audio time is each stream's aggregate RTF; the largest K with it
   at most 1 keeps real time. Decoders are built before the clock starts.
4. **end to end**: K ``microphone`` connectors on the file (``realtime = false``)
   each feeding a ``speech`` node with the grammar, in one ``FlowSession``:
   durable chunks, queue and artifact store included. Largest K whose audio is
   all transcribed in at most its own duration, each stream giving as many
   utterances as one stream alone.
5. **overhead**: 16 microphone → speech flows in real time against the same
   recogniser fed the same chunks bare, CPU by area (:mod:`bench.speech.overhead`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._lib.common import Json, emit_result, measure_child
from bench.speech import overhead as speech_overhead
from bench.speech.audio import GRAMMAR, make_audio, wav_chunks

MODES = ("grammar", "lm")
DECODER_MIB = {"grammar": 28, "lm": 92}  # measured RSS per decoder, for the memory cap


def new_stream(mode: str) -> Any:
    from mediaflow.nodes.pocketsphinx_config import SphinxSearch
    from mediaflow.nodes.pocketsphinx_engine import PocketSphinxRecognizer
    from mediaflow.nodes.speech import SpeechStream

    search = SphinxSearch(grammar=GRAMMAR.read_text()) if mode == "grammar" else SphinxSearch()
    return SpeechStream(PocketSphinxRecognizer(search))


def decode_all(stream: Any, chunks: list[bytes], chunk_ms: int) -> int:
    finals = 0
    for index, chunk in enumerate(chunks):
        finals += sum(t.final for t in stream.push(chunk, index * chunk_ms / 1000))
    return finals


# -- children: one measurement each ---------------------------------------------------


def child_rtf(args: Json) -> Json:
    chunks = wav_chunks(Path(args["audio"]), 20)
    stream = new_stream(args["mode"])
    cpu, wall = time.thread_time(), time.perf_counter()
    finals = decode_all(stream, chunks, 20)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    audio_s = len(chunks) * 0.02
    return {"rtf_cpu": cpu / audio_s, "rtf_wall": wall / audio_s, "finals": finals}


def _threads(mode: str, k: int, chunks: list[bytes], go: Callable[[], None] | None) -> float:
    """Decode ``chunks`` in ``k`` threads at once, one stream each; wall seconds."""
    streams = [new_stream(mode) for _ in range(k)]
    if go is not None:
        go()  # every process has built its decoders: start together
    barrier = threading.Barrier(k + 1)

    def work(stream: Any) -> None:
        barrier.wait()
        decode_all(stream, chunks, 20)

    threads = [threading.Thread(target=work, args=(s,)) for s in streams]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def _process_worker(mode: str, k: int, audio: str, ready: Any, start: Any, out: Any) -> None:
    def go() -> None:
        ready.put(True)
        start.wait()

    out.put(_threads(mode, k, wav_chunks(Path(audio), 20), go))


def child_capacity(args: Json) -> Json:
    mode, k, processes, audio = args["mode"], args["k"], args["processes"], args["audio"]
    audio_s = len(wav_chunks(Path(audio), 20)) * 0.02
    if processes == 1:
        wall = _threads(mode, k, wav_chunks(Path(audio), 20), None)
    else:
        ctx = multiprocessing.get_context("spawn")
        ready, out, start = ctx.Queue(), ctx.Queue(), ctx.Event()
        shares = [k // processes + (i < k % processes) for i in range(processes)]
        procs = [
            ctx.Process(target=_process_worker, args=(mode, n, audio, ready, start, out))
            for n in shares
            if n
        ]
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.get()
        start.set()
        wall = max(out.get() for _ in procs)
        for proc in procs:
            proc.join()
    return {"rtf_per_stream": wall / audio_s, "wall_s": wall, "audio_s": audio_s}


def child_gil(args: Json) -> Json:
    chunks = wav_chunks(Path(args["audio"]), 20)
    # The language model is memory-mapped: a first pass pays its page faults.
    _threads(args["mode"], 1, chunks, None)
    one = min(_threads(args["mode"], 1, chunks, None) for _ in range(2))
    two = min(_threads(args["mode"], 2, chunks, None) for _ in range(2))
    lag = asyncio.run(_loop_lag(args["mode"], chunks))
    return {"speedup_2_threads": 2 * one / two, **lag}


async def _loop_lag(mode: str, chunks: list[bytes]) -> Json:
    """The event loop's lag while a worker thread decodes (as the node does)."""
    from concurrent.futures import ThreadPoolExecutor

    stream = new_stream(mode)
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - before - 0.001)

    executor = ThreadPoolExecutor(1)
    tick = asyncio.create_task(ticker())
    loop = asyncio.get_running_loop()
    for index, chunk in enumerate(chunks):
        await loop.run_in_executor(executor, stream.push, chunk, index * 0.02)
    done.set()
    await tick
    executor.shutdown()
    lags.sort()
    return {"lag_p99_ms": lags[int(len(lags) * 0.99)] * 1000, "lag_max_ms": lags[-1] * 1000}


def child_flow(args: Json) -> Json:
    return asyncio.run(_flow(args["k"], args["chunk_ms"], Path(args["audio"])))


async def _flow(k: int, chunk_ms: int, audio: Path) -> Json:
    from mediaflow import EngineSettings, FlowBuilder, FlowSession

    flow = FlowBuilder("bench-speech")
    for n in range(k):
        flow.add(f"mic{n}", "microphone", device=f"file:{audio}", chunk_ms=chunk_ms,
                 realtime=False)  # fmt: skip
        flow.add(f"asr{n}", "speech", inputs={"audio": f"mic{n}.audio"}, grammar=str(GRAMMAR))
    finals = 0

    def count_final(event: Any) -> None:
        nonlocal finals
        finals += event.type == "transcript" and event.data["final"]

    with tempfile.TemporaryDirectory() as data:
        session = FlowSession(flow.build(), Path(data), settings=EngineSettings.from_env())
        session.bus.listen(count_final)
        await session.start()
        started = time.perf_counter()
        await session.wait(until_idle=True)
        wall = time.perf_counter() - started
        await session.stop()
    with wave.open(str(audio), "rb") as wav:
        audio_s = wav.getnframes() / wav.getframerate()
    return {"rtf_per_stream": wall / audio_s, "wall_s": wall, "finals": finals, "k": k}


CHILDREN: dict[str, Callable[[Json], Json]] = {
    "rtf": child_rtf,
    "capacity": child_capacity,
    "gil": child_gil,
    "flow": child_flow,
    **speech_overhead.CHILDREN,
}


# -- the parent: search and report ---------------------------------------------------------


def measure(name: str, args: Json, timeout_s: float = 900) -> Json:
    """One measurement of this benchmark in a child process (its audio not echoed)."""
    return measure_child("bench.speech", name, args, timeout_s=timeout_s, hide=("audio",))


def largest_k(trial: Callable[[int], bool], guess: int, cap: int) -> tuple[int, int | None]:
    """The largest K in 1..cap for which ``trial`` passes (taken to be monotone): from
    ``guess``, double or halve to a bracket, then bisect to within 10 %. Returns
    (K, the smallest K seen failing, or None when ``cap`` passed)."""
    seen: dict[int, bool] = {}

    def passes(k: int) -> bool:
        if k not in seen:
            seen[k] = trial(k)
        return seen[k]

    k = max(1, min(guess, cap))
    if passes(k):
        good, bad = k, None
        while bad is None:
            if good >= cap:
                return good, None
            bigger = min(cap, good * 2)
            good, bad = (bigger, None) if passes(bigger) else (good, bigger)
    else:
        good, bad = 0, k
        while good == 0:
            if bad == 1:
                return 0, 1
            smaller = bad // 2
            good, bad = (smaller, bad) if passes(smaller) else (0, smaller)
    while bad - good > max(1, good // 10):
        middle = (good + bad) // 2
        good, bad = (middle, bad) if passes(middle) else (good, middle)
    return good, bad


def memory_cap(mode: str, fraction: float = 0.5) -> int:
    with open("/proc/meminfo") as fh:
        info = {line.split(":")[0]: int(line.split()[1]) for line in fh}
    return max(1, int(info["MemAvailable"] / 1024 * fraction / DECODER_MIB[mode]))


def capacity(mode: str, processes: int, audio: str, rtf: float, cap: int) -> tuple[int, int | None]:
    """Largest K streams decoding in real time in ``processes`` processes."""

    def passes(k: int) -> bool:
        args = {"mode": mode, "k": k, "processes": processes, "audio": audio}
        return bool(measure("capacity", args)["rtf_per_stream"] <= 1.0)

    return largest_k(passes, int(processes / rtf * 0.8) if rtf > 0 else 1, cap)


def flow_capacity(chunk_ms: int, audio: str, cap: int) -> tuple[int, int | None]:
    """Largest K microphone → speech pairs in one flow that keep real time, each
    giving as many utterances as one pair alone does."""
    alone = measure("flow", {"k": 1, "chunk_ms": chunk_ms, "audio": audio})["finals"]

    def passes(k: int) -> bool:
        result = measure("flow", {"k": k, "chunk_ms": chunk_ms, "audio": audio})
        if result["finals"] != k * alone:
            raise RuntimeError(f"{k} streams gave {result['finals']} utterances, not {k * alone}")
        return bool(result["rtf_per_stream"] <= 1.0)

    return largest_k(passes, 4, cap)


def run(args: argparse.Namespace) -> Json:
    cpus = os.cpu_count() or 1
    report: Json = {"cpus": cpus, "audio_s": args.audio_s, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        audio = str(make_audio(Path(tmp) / "speech.wav", args.audio_s))
        for mode in MODES:
            if mode in args.skip:
                continue
            rtfs = [measure("rtf", {"mode": mode, "audio": audio}) for _ in range(args.reps)]
            rtf = statistics.median(r["rtf_cpu"] for r in rtfs)
            cap = min(args.max_k, memory_cap(mode))
            row = {"rtf_cpu": rtf, **measure("gil", {"mode": mode, "audio": audio}), "k_cap": cap}
            if "capacity" not in args.skip:
                row["k_1p"] = capacity(mode, 1, audio, rtf, cap)
                row["k_np"] = capacity(mode, cpus, audio, rtf, cap)
            report["modes"][mode] = row
        if "flow" not in args.skip:
            flow_audio = str(make_audio(Path(tmp) / "flow.wav", args.flow_audio_s))
            report["flow"] = {
                chunk_ms: flow_capacity(chunk_ms, flow_audio, args.max_k) for chunk_ms in (20, 100)
            }
    if "overhead" not in args.skip:
        report["overhead"] = speech_overhead.overhead_report(measure, args.reps)
    return report


def _k(value: list[Any] | tuple[int, int | None] | None, cap: int | None = None) -> str:
    if value is None:
        return "skipped"
    good, bad = value
    if bad is not None:
        return f"{good} (fails at {bad})"
    return f"≥ {good} (cap {cap})"


def table(report: Json) -> str:
    cpus = report["cpus"]
    lines = [
        f"speech on {cpus} CPUs, {report['audio_s']:.0f} s of espeak-ng audio per stream, "
        "16 kHz mono",
        "",
        "| search | RTF per stream (CPU s / audio s) | 2 threads vs 1 | loop lag p99 / max "
        f"| streams in real time: 1 process | {cpus} processes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for mode, row in report["modes"].items():
        lines.append(
            f"| {'JSGF grammar' if mode == 'grammar' else 'default LM'} | {row['rtf_cpu']:.4f} "
            f"| {row['speedup_2_threads']:.2f}x "
            f"| {row['lag_p99_ms']:.1f} / {row['lag_max_ms']:.1f} ms "
            f"| {_k(row.get('k_1p'), row['k_cap'])} | {_k(row.get('k_np'), row['k_cap'])} |"
        )
    if "flow" in report:
        lines += [
            "",
            "| end to end: microphone → speech (grammar), one FlowSession | streams in real time |",
            "| --- | --- |",
        ]
        for chunk_ms, value in report["flow"].items():
            lines.append(f"| {chunk_ms} ms chunks | {_k(value)} |")
    if "overhead" in report:
        lines += ["", speech_overhead.overhead_table(report["overhead"])]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.speech", description=__doc__.split("\n")[0])
    p.add_argument("--audio-s", type=float, default=20.0, help="audio per stream (decoders)")
    p.add_argument("--flow-audio-s", type=float, default=10.0, help="audio per stream (flows)")
    p.add_argument("--reps", type=int, default=3, help="RTF runs per search (median)")
    p.add_argument("--max-k", type=int, default=512, help="most streams tried")
    p.add_argument(
        "--skip", default="", help="comma list of: grammar, lm, capacity, flow, overhead"
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--redecode", action="store_true", help="only the re-decode cost table")
    p.add_argument("--wer", action="store_true", help="only the WER table (real recordings)")
    p.add_argument(
        "--overhead", action="store_true", help="only the pipeline / bare recogniser table"
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-args", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.skip = set(filter(None, args.skip.split(",")))
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--engines" in argv:
        # Both engines side by side, its own options: see bench/speech/engines.py.
        from bench.speech import engines as speech_engines

        return speech_engines.main([arg for arg in argv if arg != "--engines"])
    args = parse_args(argv)
    if args.child:
        emit_result(CHILDREN[args.child](json.loads(args.child_args)))
        return 0
    if args.overhead:
        overhead = speech_overhead.overhead_report(measure, args.reps)
        print(
            json.dumps(overhead, indent=2)
            if args.json
            else speech_overhead.overhead_table(overhead)
        )
        return 0
    if args.redecode or args.wer:
        # Finals decoded whole: see bench/speech/whole.py.
        from bench.speech import whole as speech_whole

        if args.redecode:
            cost = speech_whole.cost_report(args.reps, args.audio_s)
            print(json.dumps(cost, indent=2) if args.json else speech_whole.cost_table(cost))
        if args.wer:
            accuracy = speech_whole.wer_report()
            print(json.dumps(accuracy, indent=2) if args.json else speech_whole.wer_table(accuracy))
        return 0
    report = run(args)
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
