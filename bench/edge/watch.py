"""Looks at a running edge box from outside, as an operator would take them.

Every ``every_s`` the :class:`Watcher` takes one :class:`Look`: the flow's API
(``GET /api/flows/edge``: each source port's ``seq``, so how many items the
sources have put in the forwarded streams), one scrape of ``/metrics``
(``mediaflow_forward_items_total``, the backlog the box shows, whether its link
is up), the camera's newest value where the work goes (``latest(flow)`` of the
shared Redis queue, through mediaflow's public ``open_queue``: how old the
present is there), and the process's CPU time and RSS (psutil) with the
machine's busy cores. A part that does not answer (Redis while it is stopped)
leaves its fields None; the look is still taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bench._lib.sample import METRIC_LINE
from bench.edge.flow import CAMERA, CONSUMERS, FLOW
from mediaflow.queue import QueueError, open_queue

TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Look:
    """One look; ``t`` is ``time.monotonic()``, ``machine_s`` the machine's busy CPU
    seconds so far (every core), ``cpu_s`` the box's own."""

    t: float
    cpu_s: float
    machine_s: float
    rss: int
    emitted: int | None  # items the sources put in the forwarded streams so far
    forwarded: int | None  # items the box forwarded so far
    backlog: int | None  # the backlog the box shows (mediaflow_forward_backlog_items)
    link_up: bool | None
    age_s: float | None  # now minus captured_at of the camera's newest value, shared side

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def machine_busy_s() -> float:
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


class Watcher:
    """Takes a :class:`Look` every ``every_s`` until :meth:`stop` (``shared``: the
    shared queue's URL, None for a box that does not forward)."""

    def __init__(self, url: str, pid: int, shared: str | None, every_s: float) -> None:
        self.url = url
        self.process = psutil.Process(pid)
        self.shared = shared
        self.every_s = every_s
        self.looks: list[Look] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> list[Look]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return self.looks

    def cpu_s(self) -> float:
        """The box's CPU time so far (user + system, its children's too)."""
        times = self.process.cpu_times()
        return float(times.user + times.system + times.children_user + times.children_system)

    async def _watch(self) -> None:
        queue = open_queue(self.shared, Path("/nonexistent")) if self.shared else None
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as client:
                while True:
                    started = time.monotonic()
                    with contextlib.suppress(psutil.NoSuchProcess):
                        self.looks.append(await self._look(client, queue))
                    await asyncio.sleep(max(0.0, self.every_s - (time.monotonic() - started)))
        finally:
            if queue is not None:
                await queue.close()

    async def _look(self, client: aiohttp.ClientSession, queue: Any) -> Look:
        flow, metrics, age = await asyncio.gather(
            _get_json(client, f"{self.url}/api/flows/{FLOW}"),
            _get_metrics(client, f"{self.url}/metrics"),
            _camera_age(queue),
        )
        forwarded = metrics.get(f'mediaflow_forward_items_total{{flow="{FLOW}"}}')
        backlog = metrics.get(f'mediaflow_forward_backlog_items{{flow="{FLOW}"}}')
        link = metrics.get(f'mediaflow_forward_link_up{{flow="{FLOW}"}}')
        return Look(
            t=time.monotonic(),
            cpu_s=self.cpu_s(),
            machine_s=machine_busy_s(),
            rss=int(self.process.memory_info().rss),
            emitted=_emitted(flow),
            forwarded=None if forwarded is None else int(forwarded),
            backlog=None if backlog is None else int(backlog),
            link_up=None if link is None else link == 1.0,
            age_s=age,
        )


async def _get_json(client: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    try:
        async with client.get(url) as response:
            body: dict[str, Any] = await response.json()
            return body
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def _get_metrics(client: aiohttp.ClientSession, url: str) -> dict[str, float]:
    try:
        async with client.get(url) as response:
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError):
        return {}
    values: dict[str, float] = {}
    for line in text.splitlines():
        found = METRIC_LINE.match(line)
        if found and not line.startswith("#"):
            values[found.group(1) + (found.group(2) or "")] = float(found.group(3))
    return values


def _emitted(flow: dict[str, Any] | None) -> int | None:
    """Items the sources put in the forwarded streams: each consumer's port's ``seq``."""
    if flow is None:
        return None
    seqs = {
        (node["id"], port): int(out.get("seq") or 0)
        for node in flow.get("nodes", [])
        for port, out in (node.get("outputs") or {}).items()
    }
    return sum(seqs.get(source, 0) for source in CONSUMERS.values())


async def _camera_age(queue: Any) -> float | None:
    """How old the camera's newest JPEG is where the work goes (None: Redis away)."""
    if queue is None:
        return None
    try:
        latest = await asyncio.wait_for(queue.latest(FLOW), TIMEOUT_S)
    except (QueueError, OSError, TimeoutError):
        return None
    value = latest.get((CAMERA, "image"))
    if not isinstance(value, dict):
        return None
    meta = (value.get("$ref") or {}).get("meta") or {}
    captured = meta.get("captured_at")
    return None if captured is None else time.time() - float(captured)
