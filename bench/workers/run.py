"""The executors of :mod:`bench.workers`: the bare loop's processes, and a flow run
by ``mediaflow run`` plus workers as real processes on one Redis, read back from
the consumer's log.

Blocking (subprocesses and polling); every process started here is stopped
(SIGTERM for a worker, then SIGKILL past the deadline) before a function returns.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench._lib.common import REPO_ROOT, Json
from bench._lib.redis_tools import RedisTarget, forget_prefix

READY_POLL_S = 0.02


def bare_loop(n: int, iterations: int, processes: int = 1) -> Json:
    """The burn N times in ``processes`` fresh interpreters that import only the
    loop (:mod:`bench.workers.burn_loop`), items dealt round-robin, all starting at one
    moment; timed from the first start to the last end."""
    at = time.monotonic() + 0.5  # every interpreter is up by then
    loop = [sys.executable, "-m", "bench.workers.burn_loop"]
    children = [
        subprocess.Popen(
            [*loop, str(k), str(processes), str(n), str(iterations), repr(at)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(processes)
    ]
    spans = [json.loads(child.communicate(timeout=600)[0]) for child in children]
    window = max(s["end"] for s in spans) - min(s["start"] for s in spans)
    return {"n": n, "processes": processes, "window_s": window, "rate": n / window}


def flow_toml(where: Path, n: int, iterations: int) -> str:
    return (
        '[flow]\nname = "burn"\n'
        '[[node]]\nid = "src"\nuse = "bench.workers.burn:Emitter"\n'
        f'count = {n}\ndone_file = "{where / "src.done"}"\n'
        '[[node]]\nid = "burn"\nuse = "bench.workers.burn:Burner"\n'
        f'iterations = {iterations}\nlog_file = "{where / "work.log"}"\n'
        f'ready_file = "{where / "ready"}"\ngo_file = "{where / "go"}"\n'
        'inputs = { item = "src.item" }\n'
    )


def start(where: Path, env: dict[str, str], name: str, *args: str) -> subprocess.Popen[bytes]:
    """``python -m mediaflow ARGS --data where/data-NAME``; stderr to ``NAME.err``, a
    worker's stdout (its ``--jsonl`` summary) to ``NAME.out``."""
    command = [sys.executable, "-m", "mediaflow", *args, "--data", str(where / f"data-{name}")]
    out_path = where / f"{name}.out" if args[0] == "worker" else Path(os.devnull)
    # The child gets its own copies of the descriptors; the parent's close here.
    with open(out_path, "wb") as out, open(where / f"{name}.err", "wb") as err:
        return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=err)


def wait_until_ready(
    where: Path, procs: dict[str, subprocess.Popen[bytes]], deadline: float
) -> str | None:
    """None once the source is done and every executor waits at the gate; else why not."""
    while time.monotonic() < deadline:
        ready = (where / "ready").read_text().split() if (where / "ready").exists() else []
        if (where / "src.done").exists() and len(set(ready)) >= len(procs):
            return None
        for name, proc in procs.items():
            if proc.poll() is not None:
                return f"{name} exited with status {proc.returncode} before the start"
        time.sleep(READY_POLL_S)
    return "timed out waiting for the source and the executors"


def flow_once(
    target: RedisTarget, n: int, iterations: int, executors: int, timeout_s: float
) -> Json:
    """One measurement: ``mediaflow run`` plus ``executors - 1`` workers."""
    prefix, url = target.with_prefix(f"workers{executors}")
    env = {**os.environ, "MEDIAFLOW_QUEUE": url, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("MEDIAFLOW_LEASE_MS", None)
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        where = Path(tmp)
        flow = where / "burn.toml"
        flow.write_text(flow_toml(where, n, iterations))
        deadline = time.monotonic() + timeout_s
        procs = {"run": start(where, env, "run", "run", str(flow), "--until-idle")}
        for k in range(1, executors):
            procs[f"worker{k}"] = start(where, env, f"worker{k}", "worker", str(flow), "--jsonl")
        try:
            problem = wait_until_ready(where, procs, deadline)
            if problem is None:
                (where / "go").touch()
                try:
                    procs["run"].wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    problem = f"mediaflow run did not finish within {timeout_s:.0f} s"
            for name, proc in procs.items():
                if name != "run" and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)  # finishes what it holds, then exits
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        problem = problem or f"{name} did not stop within 30 s of SIGTERM"
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            forget_prefix(target, prefix)
        result = read_log(where / "work.log", n, procs)
        result["executors"] = executors
        if result.get("window_s"):
            result["busy"] = result.pop("burning_s") / (result["window_s"] * executors)
        result["exit"] = {name: proc.returncode for name, proc in procs.items()}
        result["stderr"] = {
            name: notable((where / f"{name}.err").read_text(errors="replace")) for name in procs
        }
        result["worker_items"] = [
            json.loads(line)["items"]
            for name in procs
            if name != "run"
            for line in (where / f"{name}.out").read_text().splitlines()
            if line.startswith("{")
        ]
        if problem:
            result["error"] = problem
        return result


def read_log(path: Path, n: int, procs: dict[str, subprocess.Popen[bytes]]) -> Json:
    """Rate, shares and delivery facts from the ``pid seq start end`` lines."""
    rows = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    if not rows:
        return {"n": n, "items": 0}
    names = {proc.pid: name for name, proc in procs.items()}
    starts = [float(r[2]) for r in rows]
    ends = [float(r[3]) for r in rows]
    window = max(ends) - min(starts)
    seqs = Counter(int(r[1]) for r in rows)
    by_proc = Counter(names.get(int(r[0]), r[0]) for r in rows)
    busy = sum(e - s for s, e in zip(starts, ends, strict=True))
    return {
        "n": n,
        "items": len(rows),
        "window_s": window,
        "rate": len(set(seqs)) / window if window > 0 else None,
        "shares": {name: count / len(rows) for name, count in sorted(by_proc.items())},
        "burn_ms": busy / len(rows) * 1000,
        "burning_s": busy,
        "missing": n - len(seqs),
        "repeated": sum(c - 1 for c in seqs.values() if c > 1),
    }


NOTABLE = re.compile(r"Traceback|\b(WARNING|ERROR|CRITICAL)\b|^mediaflow: |^\w+(Error|Exception)\b")


def notable(stderr: str) -> list[str]:
    """Lines of an executor's stderr worth a report: warnings, errors, tracebacks."""
    return [line for line in stderr.splitlines() if NOTABLE.search(line)][:20]
