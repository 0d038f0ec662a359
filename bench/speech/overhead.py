"""The speech path's overhead: K microphone → speech flows against the bare recogniser.

``python -m bench.speech --overhead`` (or the ``overhead`` step of the full run).
Each repetition runs two children, one after the other, on the demo's speech
(``mediaflow/demo/speech/commands.wav``, looped) in 100 ms chunks, paced in real
time:

- ``overhead_bare``: K :class:`~mediaflow.nodes.pocketsphinx_engine.PocketSphinxRecognizer`
  built from the node's own recipe (the demo grammar, partials, finals decoded
  whole) fed the same 16 kHz chunks in one process: no store, queue, engine,
  WAV or pipe. Its CPU is the recogniser's.
- ``overhead_flow``: K ``microphone`` (``file:``, ``realtime``, ``loop``) →
  ``speech`` (the grammar) pairs in one :class:`~mediaflow.FlowSession`, with
  every guarantee on (each chunk a fsynced WAV artifact and a durable queue
  item). After a warm-up, the CPU of the process and of its speech host
  processes over the window, split by thread (``/proc``: the event loop, the
  I/O pool, the speech nodes' threads, the rest) and hosts.

The ratio flow / bare (cores against cores, same audio) is the overhead; the
table gives its median and range over the repetitions. CPU is counted for this
process tree only: the kernel's own threads that an fsync wakes (the
filesystem's journal) are not in it, on either side.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import tempfile
import time
import wave
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._lib.common import Json, run_async
from bench._lib.demo import DEMO_DIR

SPEECH = DEMO_DIR / "speech" / "commands.wav"
GRAMMAR = DEMO_DIR / "grammar" / "commands.gram"
RATE = 16000
THREAD_GROUPS = (
    ("event loop", re.compile(r"MainThread$")),
    ("I/O pool (saves, reads)", re.compile(r"mediaflow-io")),
    ("speech nodes' threads", re.compile(r"speech-")),
    ("queue checkpoints", re.compile(r"mediaflow-sqlite")),
)


def _recipe() -> Any:
    from mediaflow.nodes.speech import SpeechNode

    # The node's own recipe: what a `use = "speech"` with this grammar builds.
    sphinx = SpeechNode(grammar=str(GRAMMAR)).sphinx
    assert sphinx is not None
    return sphinx.recipe(GRAMMAR.parent)


def child_bare(args: Json) -> Json:
    """K recognisers fed the demo's speech in real time, in this process."""
    k, seconds, chunk_ms = args["k"], args["seconds"], args["chunk_ms"]
    with wave.open(str(SPEECH), "rb") as wav:
        pcm = wav.readframes(wav.getnframes())
    recipe = _recipe()
    recognizers = [recipe.build() for _ in range(k)]
    step = RATE * 2 * chunk_ms // 1000
    usable = len(pcm) - len(pcm) % step
    ticks = round(seconds * 1000 / chunk_ms)
    finals = 0
    cpu, started = time.process_time(), time.monotonic()
    for tick in range(ticks):
        at = tick * step % usable
        chunk = pcm[at : at + step]
        for recognizer in recognizers:
            finals += sum(result.final for result in recognizer.feed(chunk))
        delay = started + (tick + 1) * chunk_ms / 1000 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    wall = time.monotonic() - started
    return {"cores": (time.process_time() - cpu) / wall, "finals": finals, "wall_s": wall}


def child_flow(args: Json) -> Json:
    """K microphone → speech flows in one FlowSession, real time; CPU by area."""
    return run_async(_flow(args["k"], args["seconds"], args["chunk_ms"], args["warmup_s"]))


async def _flow(k: int, seconds: float, chunk_ms: int, warmup_s: float) -> Json:
    from mediaflow import EngineSettings, FlowBuilder, FlowSession

    flow = FlowBuilder("bench-speech-overhead")
    for n in range(k):
        flow.add(f"mic{n}", "microphone", device=f"file:{SPEECH}", chunk_ms=chunk_ms,
                 realtime=True, loop=True)  # fmt: skip
        flow.add(f"asr{n}", "speech", inputs={"audio": f"mic{n}.audio"}, grammar=str(GRAMMAR))
    heard_so_far = 0

    def count_final(event: Any) -> None:
        nonlocal heard_so_far
        heard_so_far += event.type == "transcript" and event.data["final"]

    def finals() -> int:
        return heard_so_far

    with tempfile.TemporaryDirectory() as data:
        session = FlowSession(flow.build(), Path(data), settings=EngineSettings.from_env())
        session.bus.listen(count_final)
        await session.start()
        try:
            await asyncio.sleep(warmup_s)
            hosts = _children()
            before = _sample(hosts)
            heard = finals()
            await asyncio.sleep(seconds)
            after = _sample(hosts)
            heard = finals() - heard
        finally:
            await session.stop()
    wall = after.at - before.at
    areas = {name: (after.threads[name] - before.threads[name]) / wall for name in after.threads}
    own = (after.process - before.process) / wall
    areas["other threads (devices, ended threads)"] = own - sum(areas.values())
    areas["speech host processes"] = (after.hosts - before.hosts) / wall
    return {"cores": own + areas["speech host processes"], "areas": areas, "finals": heard,
            "wall_s": wall, "hosts": len(hosts)}  # fmt: skip


def _children() -> list[int]:
    """The speech nodes' recogniser hosts: this process's children started by
    multiprocessing's spawn (not its resource tracker; the flow starts no other)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent = int(fh.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    spawned = b"spawn_main" in fh.read()
            except OSError:  # it ended meanwhile
                continue
            if parent == me and spawned:
                found.append(int(entry))
    return found


class _Sample:
    def __init__(self, at: float, process: float, threads: dict[str, float], hosts: float):
        self.at, self.process, self.threads, self.hosts = at, process, threads, hosts


def _sample(hosts: list[int]) -> _Sample:
    import threading

    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    threads: dict[str, float] = defaultdict(float)
    for name, _ in THREAD_GROUPS:
        threads[name] = 0.0
    for tid in os.listdir("/proc/self/task"):
        name = names.get(int(tid), "")
        group = next((g for g, pattern in THREAD_GROUPS if pattern.match(name)), None)
        if group is not None:
            threads[group] += _cpu(f"/proc/self/task/{tid}/stat")
    times = os.times()
    return _Sample(
        time.monotonic(),
        times.user + times.system,
        dict(threads),
        sum(_cpu(f"/proc/{pid}/stat") for pid in hosts),
    )


def _cpu(stat_path: str) -> float:
    """utime + stime of a process or thread, in seconds (0 if it is gone)."""
    try:
        with open(stat_path) as fh:
            text = fh.read()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CHILDREN: dict[str, Callable[[Json], Json]] = {
    "overhead_bare": child_bare,
    "overhead_flow": child_flow,
}


def overhead_report(
    measure: Callable[[str, Json], Json],
    reps: int = 3,
    k: int = 16,
    seconds: float = 30.0,
    chunk_ms: int = 100,
    warmup_s: float = 8.0,
) -> Json:
    """``reps`` pairs of (bare, flow) runs through ``measure(child, args)``; the ratio
    of each pair and the flow's CPU by area. Raises ``RuntimeError`` if a flow heard
    fewer utterances than its bare recogniser would in that time (it fell behind)."""
    args = {"k": k, "seconds": seconds, "chunk_ms": chunk_ms}
    runs = []
    for _ in range(reps):
        bare = measure("overhead_bare", args)
        flow = measure("overhead_flow", {**args, "warmup_s": warmup_s})
        if flow["finals"] < 0.8 * bare["finals"]:
            raise RuntimeError(
                f"the flows heard {flow['finals']} utterances, bare {bare['finals']}"
            )
        runs.append({"bare": bare, "flow": flow, "ratio": flow["cores"] / bare["cores"]})
    return {"k": k, "seconds": seconds, "chunk_ms": chunk_ms, "runs": runs}


def _spread(values: list[float], fmt: str = "{:.3f}") -> str:
    middle = fmt.format(statistics.median(values))
    return f"{middle} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def overhead_table(report: Json) -> str:
    runs = report["runs"]
    k, chunk_ms = report["k"], report["chunk_ms"]
    lines = [
        f"speech path overhead: {k} streams of the demo's speech, {chunk_ms} ms chunks, "
        f"real time, {report['seconds']:.0f} s windows; median (min-max) of {len(runs)} runs",
        "",
        "| | cores | ms CPU per chunk |",
        "| --- | --- | --- |",
    ]
    chunks_per_s = k * 1000 / chunk_ms

    def row(label: str, values: list[float]) -> str:
        per_chunk = [cores * 1000 / chunks_per_s for cores in values]
        return f"| {label} | {_spread(values)} | {_spread(per_chunk, '{:.2f}')} |"

    lines.append(row("bare recogniser (same recipe, chunks)", [r["bare"]["cores"] for r in runs]))
    lines.append(row("**pipeline: microphone → speech**", [r["flow"]["cores"] for r in runs]))
    for area in runs[0]["flow"]["areas"]:
        lines.append(row(f"  {area}", [r["flow"]["areas"][area] for r in runs]))
    lines += ["", f"**ratio pipeline / bare: {_spread([r['ratio'] for r in runs], '{:.2f}')}**"]
    return "\n".join(lines)
