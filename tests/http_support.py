"""Shared helpers for the HTTP tests (``tests/test_http_*.py``): a real server on
127.0.0.1, raw-socket requests, and a server thread for property tests.

No tests live here; the other modules import what they use.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from mediaflow.server import AppState, ServerSettings, bound_port, start_server

# Every HTTP test binds loopback only.
HOST = "127.0.0.1"

# Transfer paths: "sendfile" (direct + loop.sendfile) and "fallback" (chunked reads),
# both with inline bodies off so every body takes the path named; "inline" is the default.
PATHS = {
    "sendfile": ServerSettings(sendfile=True, inline_max=0),
    "fallback": ServerSettings(sendfile=False, inline_max=0),
}


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Served:
    """A running server and a client session pointed at it."""

    state: AppState
    runner: web.AppRunner
    port: int
    client: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def statuses(self, path_prefix: str = "") -> list[int]:
        return [a.status for a in self.state.answered if a.path.startswith(path_prefix)]


@asynccontextmanager
async def serve(
    data_dir: Path, settings: ServerSettings | None = None, state: AppState | None = None
) -> AsyncIterator[Served]:
    """Start a real server for ``data_dir`` (or ``state``) on a free loopback port."""
    state = state or AppState.for_serve(data_dir, settings=settings or ServerSettings())
    runner = await start_server(state, HOST, 0)
    client = aiohttp.ClientSession(auto_decompress=False)
    try:
        yield Served(state, runner, bound_port(runner), client)
    finally:
        await client.close()
        await runner.cleanup()
        await state.close()


@pytest.fixture(name="transfer_path", params=sorted(PATHS))
def transfer_path_fixture(request: pytest.FixtureRequest) -> str:
    """Each test that takes ``transfer_path`` runs once per transfer path."""
    name: str = request.param
    return name


def settings_for(path: str, **changes: Any) -> ServerSettings:
    return replace(PATHS[path], **changes)


def stored_files(data_dir: Path) -> list[Path]:
    """Artifact files in the store (fan-out directories), temp files excluded."""
    root = data_dir / "artifacts"
    if not root.exists():
        return []
    return [p for p in root.rglob("*") if p.is_file() and "tmp" not in p.relative_to(root).parts]


def temp_files(data_dir: Path) -> list[Path]:
    tmp = data_dir / "artifacts" / "tmp"
    return list(tmp.iterdir()) if tmp.exists() else []


async def wait_until(predicate: Any, timeout: float = 5.0, interval: float = 0.02) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


# -- raw HTTP ----------------------------------------------------------------------


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes


_STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3})")


def parse_raw(data: bytes) -> RawResponse:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    matched = _STATUS_LINE.match(lines[0])
    if matched is None:
        raise AssertionError(f"not an HTTP response: {data[:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawResponse(int(matched.group(1)), headers, body)


async def raw_request(port: int, request: bytes, timeout: float = 5.0) -> RawResponse:
    """Send bytes as they are (no URL normalisation) and read until the server closes."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(request)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    return parse_raw(data)


# -- a server in a thread (for hypothesis, whose tests are synchronous) -------------------


class ServerThread:
    """Runs the app for ``state_factory()`` on its own loop in a daemon thread."""

    def __init__(self, data_dir: Path, settings: ServerSettings) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:  # reported to the test through start()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        state = AppState.for_serve(self.data_dir, settings=self.settings)
        runner = await start_server(state, HOST, 0)
        self.port = bound_port(runner)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()
            await state.close()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(20)
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(20)


@contextmanager
def server_thread(data_dir: Path, settings: ServerSettings) -> Iterator[ServerThread]:
    thread = ServerThread(data_dir, settings)
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


def random_bytes(size: int, seed: int = 0) -> bytes:
    import random

    return random.Random(seed).randbytes(size)
