"""One rung of the scale ladder: run the flow, look twice, judge, stop.

:func:`run_rung` writes the rung's flow, starts ``mediaflow run`` on it (embedded
queue, local store under a disk cap: a camera writes ~3 MB/s of JPEGs), waits out
the warm-up (models loading, the first segments), takes a :class:`Snapshot`,
optionally profiles the process through the window with py-spy, takes the second
look at the window's end and stops the run with SIGINT.
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._lib.flow_process import FlowProcess, GcEnv
from bench._lib.look import Check, Snapshot, snapshot
from bench._lib.sample import cpu_seconds, machine_busy, proc_status, scrape, tree_cpu
from bench._lib.threads import thread_cpu, window_cpu
from bench.scale.flow import FLOW_NAME, ScaleFlow, write_flow
from bench.scale.judge import cores, judge, sustained
from bench.scale.profile import HOSTS, Profile, attribute, record

MIB = 1024 * 1024


@dataclass
class RungResult:
    flow: ScaleFlow
    checks: list[Check] = field(default_factory=list)
    cores: float = 0.0  # the flow's process and its speech hosts
    machine_cores: float = 0.0  # every process on the machine, for context
    rss: int = 0
    exit_code: int | None = None
    profile: Profile | None = None
    failure: str | None = None  # the run could not be measured at all
    workdir: str = ""

    @property
    def ok(self) -> bool:
        return self.failure is None and sustained(self.checks)

    def summary(self) -> str:
        if self.failure is not None:
            return f"{self.flow.label}: not measured ({self.failure})"
        failed = [check.name for check in self.checks if not check.ok]
        verdict = "sustained" if not failed else "NOT sustained: " + ", ".join(failed)
        return (
            f"{self.flow.label}: {verdict}; {self.cores:.2f} cores "
            f"(machine {self.machine_cores:.2f}), RSS {self.rss / MIB:.0f} MiB"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "cameras": self.flow.cameras,
            "microphones": self.flow.microphones,
            "ok": self.ok,
            "cores": self.cores,
            "machine_cores": self.machine_cores,
            "rss": self.rss,
            "exit_code": self.exit_code,
            "failure": self.failure,
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks],
            "profile": None if self.profile is None else self.profile.cores,
        }


def look(pid: int, url: str) -> Snapshot:
    """One :class:`Snapshot` of the running flow. Raises ``OSError`` if it is gone."""
    t = time.monotonic()
    cpu = tree_cpu(pid)
    rss = int(proc_status(pid)["VmRSS"].split()[0]) * 1024
    with urllib.request.urlopen(f"{url}/api/flows/{FLOW_NAME}", timeout=15) as resp:
        body = json.load(resp)
    metrics = scrape(url, timeout_s=15)
    if metrics is None:
        raise OSError("the server did not answer /metrics")
    return snapshot(t, cpu, rss, body, metrics)


def run_rung(
    flow: ScaleFlow,
    *,
    warmup_s: float,
    window_s: float,
    gc: GcEnv,
    workdir: Path | None = None,
    profile: bool = False,
) -> RungResult:
    """Run ``flow`` for ``warmup_s + window_s`` and judge the window (module doc)."""
    base = workdir or Path(tempfile.mkdtemp(prefix="mediaflow-scale-"))
    result = RungResult(flow, workdir=str(base))
    flow_file = write_flow(base / "flow", flow)
    with FlowProcess(flow_file, base / "data", gc, limit_s=warmup_s + window_s + 300) as proc:
        try:
            url = proc.wait_serving(timeout_s=120)
            time.sleep(warmup_s)
            first, busy_before = look(proc.pid, url), machine_busy()
            threads_before, own_before = thread_cpu(proc.pid), cpu_seconds(proc.pid)
            if profile:
                samples = record(proc.pid, window_s, base / "py-spy.txt")
            time.sleep(max(0.0, first.t + window_s - time.monotonic()))
            threads = window_cpu(threads_before, thread_cpu(proc.pid))
            own = cpu_seconds(proc.pid) - own_before
            last, busy_after = look(proc.pid, url), machine_busy()
        except (OSError, RuntimeError) as exc:
            result.failure = f"{type(exc).__name__}: {exc}"
            result.exit_code = proc.stop()
            return result
        result.exit_code = proc.stop()
        errors = sum(" ERROR " in line for line in proc.log_text().splitlines())
    result.checks = judge(flow, first, last, errors)
    result.cores = cores(first, last)
    result.machine_cores = (busy_after[0] - busy_before[0]) / (last.t - first.t)
    result.rss = last.rss
    if profile:
        span = last.t - first.t
        result.profile = attribute(threads, samples, span, own / span)
        hosts = result.cores - own / span
        if hosts > 0.005:
            result.profile.cores[HOSTS] = hosts
    return result
