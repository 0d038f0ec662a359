"""The bundled demo started as a user starts it, ``mediaflow demo --port 0``: fixtures
that yield it (``demo``: its URL and process id; ``demo_url``: the URL) and stop it
with Ctrl-C (exit 0 expected)."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest


async def drain(stream: asyncio.StreamReader, lines: list[bytes]) -> None:
    while line := await stream.readline():
        lines.append(line)


@dataclass(frozen=True)
class Demo:
    url: str
    pid: int


@pytest.fixture(name="demo_url")
async def demo_url_fixture(demo: Demo) -> str:
    """The URL of the demo, started as a user does (``mediaflow demo``), on a free port."""
    return demo.url


@pytest.fixture(name="demo")
async def demo_fixture(tmp_path: Path) -> AsyncIterator[Demo]:
    """The demo started as a user does (``mediaflow demo``), on a free port."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediaflow", "demo", "--port", "0",
        "--data", str(tmp_path / "data"), "--for", "90", stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    log: list[bytes] = []
    reader: asyncio.Task[None] | None = None
    try:
        url = None
        while url is None:
            line = await asyncio.wait_for(proc.stderr.readline(), 20)
            assert line, b"the demo exited before serving:\n" + b"".join(log)
            log.append(line)
            found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line.decode())
            url = found.group(1) if found else None
        reader = asyncio.create_task(drain(proc.stderr, log))  # a full pipe would block it
        yield Demo(url, proc.pid)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C: the demo stops cleanly
        code = await asyncio.wait_for(proc.wait(), 30)
        if reader is not None:
            await reader
    assert code == 0, b"".join(log[-40:]).decode(errors="replace")


LIVE = "/live/demo/cam"  # the demo camera's live stream


async def wait_for_playlist(session: aiohttp.ClientSession, url: str) -> str:
    """The demo camera's live playlist once it lists a finished segment (a player of
    segments, ffmpeg or VLC, has something to play)."""
    deadline = time.monotonic() + 30
    while True:
        async with session.get(url + LIVE + ".m3u8") as resp:
            if resp.status == 200:
                assert resp.content_type == "application/vnd.apple.mpegurl"
                assert resp.headers["Cache-Control"] == "no-store"
                text = await resp.text()
                if "\ncam/segment/" in text:
                    return text
            else:
                assert resp.status == 503, await resp.text()  # not encoded yet
        assert time.monotonic() < deadline, "no finished live segment within 30 s"
        await asyncio.sleep(0.5)
