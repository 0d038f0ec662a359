"""A flow run as a user runs it, ``mediaflow run FLOW --port 0``, for tests that read
what it logs and serves: start it, find its URL, stop it with Ctrl-C."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tests.demo_process import drain

START_S = 30.0


@dataclass
class RunningFlow:
    """The served URL, and every line the process wrote on stderr so far (stdout too,
    once it stopped: ``output``)."""

    url: str
    log: list[bytes] = field(default_factory=list)
    output: bytes = b""

    def logged(self, text: bytes) -> bool:
        return any(text in line for line in self.log)


@asynccontextmanager
async def running_flow(flow: Path, data: Path, *, for_s: float = 90) -> AsyncIterator[RunningFlow]:
    """``mediaflow run flow --port 0 --data data --for for_s``; stopped with SIGINT
    (Ctrl-C) on the way out, which must end it with 0."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediaflow", "run", str(flow), "--port", "0",
        "--data", str(data), "--for", str(for_s),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None and proc.stdout is not None
    log: list[bytes] = []
    reader: asyncio.Task[None] | None = None
    running: RunningFlow | None = None
    try:
        running = RunningFlow(await _serving_url(proc.stderr, log), log)
        reader = asyncio.create_task(drain(proc.stderr, log))
        yield running
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), 30)
        if reader is not None:
            await reader
        if running is not None:
            running.output = await proc.stdout.read()
    assert code in (0, 130), b"".join(log[-40:]).decode(errors="replace")


async def _serving_url(stderr: asyncio.StreamReader, log: list[bytes]) -> str:
    while True:
        line = await asyncio.wait_for(stderr.readline(), START_S)
        assert line, b"mediaflow exited before serving:\n" + b"".join(log)
        log.append(line)
        found = re.search(rb"serving on (http://127\.0\.0\.1:\d+)", line)
        if found:
            return found.group(1).decode()


async def wait_for_emitted(
    client: aiohttp.ClientSession, url: str, flow: str, node: str, port: str, at_least: int
) -> None:
    """Until ``node`` emitted ``at_least`` values on ``port`` (``/api/flows/{flow}``)."""
    deadline = asyncio.get_running_loop().time() + START_S
    while asyncio.get_running_loop().time() < deadline:
        async with client.get(f"{url}/api/flows/{flow}") as answer:
            if answer.status == 200:
                nodes = {n["id"]: n for n in (await answer.json())["nodes"]}
                if nodes[node]["outputs"][port].get("seq", -1) + 1 >= at_least:
                    return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{node}.{port} emitted fewer than {at_least} in {START_S} s")
