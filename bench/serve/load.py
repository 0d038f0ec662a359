"""The load ``bench.serve`` puts on a server: wrk runs (a Lua script per workload
picks each request's target and prints the summary as JSON) and one streamed PUT
with the server's RSS sampled.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import shutil
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._lib.common import MIB

BIG_SIZE = 64 * MIB
SMALL_SIZE = 4096
SMALL_COUNT = 64
RANGE_SIZE = 64 * 1024

WRK_DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '@@wrk {"requests": %d, "bytes": %d, "duration_us": %d, "connect": %d, "read": %d,'
    .. ' "write": %d, "status": %d, "timeout": %d, "p99_us": %d}\\n',
    summary.requests, summary.bytes, summary.duration, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(99)))
end
"""


@dataclass
class WrkResult:
    requests_s: float
    bytes_s: float
    p99_ms: float
    errors: int

    @property
    def ok(self) -> bool:
        return self.errors == 0


# -- wrk -------------------------------------------------------------------------------


def lua_scripts(workdir: Path, big: str, small: list[str]) -> dict[str, Path]:
    ranges = workdir / "ranges.lua"
    ranges.write_text(
        textwrap.dedent(
            f"""
            math.randomseed(42)
            local blocks = {BIG_SIZE // RANGE_SIZE}
            request = function()
              local first = math.random(0, blocks - 1) * {RANGE_SIZE}
              local range = "bytes=" .. first .. "-" .. (first + {RANGE_SIZE - 1})
              return wrk.format("GET", "/artifacts/{big}", {{["Range"] = range}})
            end
            """
        )
        + WRK_DONE
    )
    names = ", ".join(f'"{d}"' for d in small)
    small_lua = workdir / "small.lua"
    small_lua.write_text(
        textwrap.dedent(
            f"""
            math.randomseed(42)
            local names = {{{names}}}
            request = function()
              return wrk.format("GET", "/artifacts/" .. names[math.random(1, #names)])
            end
            """
        )
        + WRK_DONE
    )
    whole = workdir / "whole.lua"
    whole.write_text(
        f'request = function() return wrk.format("GET", "/artifacts/{big}") end\n' + WRK_DONE
    )
    return {"ranges": ranges, "small": small_lua, "whole": whole}


def run_wrk(
    port: int, script: Path, *, duration_s: float, connections: int, threads: int
) -> WrkResult:
    cmd = [
        shutil.which("wrk") or "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{duration_s:g}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        f"http://127.0.0.1:{port}",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=duration_s + 60)
    line = next(line for line in out.stdout.splitlines() if line.startswith("@@wrk "))
    data = json.loads(line[len("@@wrk ") :])
    seconds = data["duration_us"] / 1e6
    errors = sum(data[k] for k in ("connect", "read", "write", "status", "timeout"))
    return WrkResult(
        requests_s=data["requests"] / seconds,
        bytes_s=data["bytes"] / seconds,
        p99_ms=data["p99_us"] / 1000,
        errors=errors,
    )


# -- the PUT ---------------------------------------------------------------------------


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_put(port: int, pid: int, size: int) -> dict[str, Any]:
    """Stream ``size`` bytes (chunked) to PUT /artifacts; sample the server's RSS."""
    chunk = random.Random(3).randbytes(MIB)
    expected = hashlib.sha256()
    for _ in range(size // MIB):
        expected.update(chunk)
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(rss_of(pid))
            time.sleep(0.02)

    def body() -> Iterator[bytes]:
        for _ in range(size // MIB):
            yield chunk

    before = rss_of(pid)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request(
            "PUT",
            "/artifacts/sha256:" + expected.hexdigest(),
            body=body(),
            headers={"Content-Type": "application/octet-stream"},
            encode_chunked=True,
        )
        response = conn.getresponse()
        answer = response.read()
    finally:
        conn.close()
        done.set()
        sampler.join()
    seconds = time.perf_counter() - started
    if response.status != 201:
        raise RuntimeError(f"PUT answered {response.status}: {answer[:200]!r}")
    peak = max(samples, default=before)
    return {
        "bytes": size,
        "seconds": seconds,
        "bytes_s": size / seconds,
        "rss_before": before,
        "rss_peak": peak,
        "rss_growth": peak - before,
    }
