"""One ``mediaflow run`` of K microphone → speech pairs, watched from outside.

:func:`run_pairs` writes the flow file (microphone ``k`` plays WAV file ``k``,
``chunk_ms`` chunks, ``realtime`` as asked; speech node ``k`` with the engine's
options), starts ``python -m mediaflow run FLOW --jsonl --port 0 --until-idle``
as an operator would, and while it runs:

* reads its ``--jsonl`` stdout: each microphone's first chunk gives that
  stream's clock on the wall (``captured_at - pts``: the wall time of stream
  time 0), and the first chunk seen opens the CPU window;
* reads ``GET /api/events?types=transcript&after=0`` (server-sent events): each
  final's text, ``start``/``end`` on the stream's clock and ``time``, the wall
  time the flow published it (after its ``emit`` returned);
* samples the process tree's CPU (``mediaflow run`` and its speech host
  processes, every :data:`POLL_S`): a pid that exits keeps its last sample.

It stops the run with SIGINT at ``deadline_s`` if it has not gone idle by then.
Everything here is plumbing; what the numbers mean is in
:mod:`bench.speech.engines_judge`.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench._lib.common import REPO_ROOT

POLL_S = 0.1
SERVING = re.compile(r"serving on (http://127\.0\.0\.1:\d+)")


@dataclass(frozen=True)
class Final:
    """One final transcript as the flow published it."""

    stream: int
    text: str
    start: float  # stream clock, seconds
    end: float
    time: float  # wall clock when published


@dataclass
class FlowRun:
    """What one run gave (see the module doc)."""

    k: int
    anchors: dict[int, float] = field(default_factory=dict)  # stream -> wall time of pts 0
    finals: list[Final] = field(default_factory=list)
    first_chunk: float | None = None  # wall time the first chunk was read
    cpu: list[tuple[float, float]] = field(default_factory=list)  # (wall, tree CPU s)
    exit_code: int | None = None
    stopped: bool = False  # True when the deadline stopped it (not idle by then)
    wall_s: float = 0.0
    log_tail: str = ""

    def cpu_at(self, when: float) -> float:
        """The tree's CPU seconds at wall time ``when`` (linear between samples)."""
        if not self.cpu:
            return float("nan")
        times = [t for t, _ in self.cpu]
        i = bisect.bisect_left(times, when)
        if i == 0:
            return self.cpu[0][1]
        if i >= len(self.cpu):
            return self.cpu[-1][1]
        (t0, c0), (t1, c1) = self.cpu[i - 1], self.cpu[i]
        return c0 + (c1 - c0) * (when - t0) / (t1 - t0) if t1 > t0 else c1

    def by_stream(self) -> dict[int, list[Final]]:
        out: dict[int, list[Final]] = {n: [] for n in range(self.k)}
        for final in self.finals:
            out[final.stream].append(final)
        for finals in out.values():
            finals.sort(key=lambda f: f.start)
        return out


def flow_text(
    wavs: list[Path], engine_options: dict[str, Any], *, chunk_ms: int, realtime: bool
) -> str:
    """The flow file: ``mic{n}`` plays ``wavs[n]``; ``asr{n}`` hears it."""
    lines = ["[flow]", 'name = "bench-speech-engines"', ""]
    for n, wav in enumerate(wavs):
        lines += [
            "[[node]]", f'id = "mic{n}"', 'connector = "microphone"',
            f"device = {json.dumps('file:' + str(wav))}", f"chunk_ms = {chunk_ms}",
            f"realtime = {'true' if realtime else 'false'}", "",
            "[[node]]", f'id = "asr{n}"', 'use = "speech"',
            *(f"{key} = {json.dumps(value)}" for key, value in engine_options.items()),
            f'inputs = {{ audio = "mic{n}.audio" }}', "",
        ]  # fmt: skip
    return "\n".join(lines)


def _tree_cpu(root: Any, seen: dict[int, float]) -> float:
    """Sum of user + system CPU over ``root`` and its descendants, ever seen."""
    import psutil

    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = []
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        seen[proc.pid] = times.user + times.system
    return sum(seen.values())


def run_pairs(
    work: Path,
    wavs: list[Path],
    engine_options: dict[str, Any],
    *,
    chunk_ms: int,
    realtime: bool,
    deadline_s: float,
) -> FlowRun:
    """Run the flow (module doc) in ``work`` and return what it gave. Raises
    ``RuntimeError`` with the log's tail if the run does not start serving."""
    import psutil

    flow = work / "flow.toml"
    flow.write_text(flow_text(wavs, engine_options, chunk_ms=chunk_ms, realtime=realtime))
    log_path = work / "mediaflow.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARTIFACT_", "MEDIAFLOW_"))}
    env["HF_HUB_OFFLINE"] = "1"
    command = [sys.executable, "-m", "mediaflow", "run", str(flow), "--data", str(work / "data")]
    command += ["--jsonl", "--port", "0", "--until-idle"]
    result = FlowRun(k=len(wavs))
    started = time.time()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert proc.stdout is not None
        root = psutil.Process(proc.pid)
        done = threading.Event()
        readers = [
            threading.Thread(target=_read_jsonl, args=(proc.stdout, result), daemon=True),
            threading.Thread(target=_poll_cpu, args=(root, result, done), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            url = _wait_serving(log_path, proc, timeout_s=120)
            events = threading.Thread(target=_read_events, args=(url, result), daemon=True)
            events.start()
            readers.append(events)
            try:
                proc.wait(timeout=max(1.0, started + deadline_s - time.time()))
            except subprocess.TimeoutExpired:
                result.stopped = True
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            done.set()
            for reader in readers:
                reader.join(10)
    result.exit_code = proc.returncode
    result.wall_s = time.time() - started
    result.log_tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
    return result


def _wait_serving(log_path: Path, proc: subprocess.Popen[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = SERVING.search(log_path.read_text(errors="replace"))
        if found:
            return found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
    raise RuntimeError(f"mediaflow run did not start serving:\n{tail}")


def _read_jsonl(stdout: IO[str], result: FlowRun) -> None:
    for line in stdout:
        if not line.startswith('{"node": "mic'):
            continue  # transcripts come with their times from the events
        row = json.loads(line)
        stream = int(row["node"][3:])
        if stream in result.anchors:
            continue
        if result.first_chunk is None:
            result.first_chunk = time.time()
        meta = row["value"]["meta"]
        result.anchors[stream] = float(meta["captured_at"]) - float(meta["pts"])


def _poll_cpu(root: Any, result: FlowRun, done: threading.Event) -> None:
    seen: dict[int, float] = {}
    while not done.is_set():
        result.cpu.append((time.time(), _tree_cpu(root, seen)))
        done.wait(POLL_S)


def _read_events(url: str, result: FlowRun) -> None:
    try:
        with urllib.request.urlopen(f"{url}/api/events?types=transcript&after=0") as response:
            for raw in response:
                line = raw.decode()
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[len("data: ") :])
                if event.get("final") and str(event.get("node", "")).startswith("asr"):
                    result.finals.append(
                        Final(
                            int(event["node"][3:]), str(event["text"]), float(event["start"]),
                            float(event["end"]), float(event["time"]),
                        )
                    )  # fmt: skip
    except OSError:
        return  # the server went away with the run
