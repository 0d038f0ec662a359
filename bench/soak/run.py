"""A soak run: start the flow's process, sample it every few seconds, stop it cleanly.

:func:`run_soak` blocks for ``seconds`` (plus start-up and a clean stop) and returns
the samples with what the process said: its exit code and the ``ERROR`` lines of
its log. Samples are timed from the moment the server answered, on the monotonic
clock, every ``every`` seconds on absolute deadlines (a slow sample does not shift
the next ones).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench._lib.flow_process import FlowProcess, GcEnv
from bench._lib.sample import Sample, take_sample
from bench.soak.flow import SoakFlow, write_flow


@dataclass
class SoakResult:
    """What a run gave: its samples and how the process ended."""

    flow: SoakFlow
    gc: GcEnv
    seconds: float
    samples: list[Sample] = field(default_factory=list)
    exit_code: int | None = None
    errors: list[str] = field(default_factory=list)  # the log's ERROR lines
    log_tail: str = ""
    loadavg: list[tuple[float, float, float]] = field(default_factory=list)  # start, end
    workdir: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "flow": asdict(self.flow),
            "gc": asdict(self.gc),
            "seconds": self.seconds,
            "exit_code": self.exit_code,
            "errors": self.errors,
            "loadavg": self.loadavg,
            "samples": [s.to_json() for s in self.samples],
        }


def run_soak(
    seconds: float,
    *,
    flow: SoakFlow,
    gc: GcEnv,
    every: float = 5.0,
    workdir: Path | None = None,
    progress: Callable[[Sample], None] | None = None,
    hosts: bool = True,
) -> SoakResult:
    """Run the soak for ``seconds`` in ``workdir`` (a fresh temporary directory if
    None; left in place for the log). Raises ``RuntimeError`` if the process does
    not start serving; a process that dies mid-run ends the sampling early."""
    base = workdir or Path(tempfile.mkdtemp(prefix="mediaflow-soak-"))
    flow_file = write_flow(base / "flow", flow)
    result = SoakResult(flow, gc, seconds, workdir=str(base), loadavg=[os.getloadavg()])
    with FlowProcess(flow_file, base / "data", gc, limit_s=seconds + 120) as proc:
        url = proc.wait_serving()
        started = time.monotonic()
        deadline = started
        while True:
            elapsed = time.monotonic() - started
            try:
                sample = take_sample(proc.pid, proc.data_dir, url, round(elapsed, 2), hosts=hosts)
            except OSError:
                break  # the process is gone: the exit code says why
            result.samples.append(sample)
            if progress is not None:
                progress(sample)
            if elapsed >= seconds:
                break
            deadline = min(deadline + every, started + seconds)
            time.sleep(max(0.0, deadline - time.monotonic()))
        result.exit_code = proc.stop()
        log = proc.log_text()
    result.loadavg.append(os.getloadavg())
    result.errors = [line for line in log.splitlines() if " ERROR " in line]
    result.log_tail = "\n".join(log.splitlines()[-30:])
    (base / "soak.json").write_text(json.dumps(result.to_json()))
    return result
