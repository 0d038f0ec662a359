"""A real webhook receiver on a free loopback port, and a source that emits numbered
events: what the webhook tests (``tests/test_webhook*.py``) drive the sink with."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import web

from mediaflow import Context, Node
from mediaflow.server import bound_port

SECRET = "shh-webhook-secret-0123456789"


@dataclass(frozen=True)
class Request:
    """One POST the receiver got, and what it answered."""

    body: bytes
    headers: Mapping[str, str]
    status: int

    @property
    def json(self) -> Any:
        return json.loads(self.body)


Plan = Callable[[int], int | None]
"""The status to answer the n-th request (0-based); None: never answer."""


@dataclass
class Receiver:
    """Records every request; answers as ``plan`` says (changeable while it runs)."""

    plan: Plan
    requests: list[Request] = field(default_factory=list)
    url: str = ""
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    asked: int = 0  # requests that arrived, answered or not

    def delivered(self) -> list[Any]:
        """The bodies of the requests answered 2xx, parsed, in arrival order."""
        return [r.json for r in self.requests if 200 <= r.status < 300]

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        status = self.plan(self.asked)
        self.asked += 1
        if status is None:
            await asyncio.sleep(3600)  # a receiver that never answers
            status = 504
        self.requests.append(Request(body, dict(request.headers), status))
        self.arrived.set()
        return web.Response(status=status, text="ok" if status < 300 else "no")

    async def wait_for(self, check: Callable[[], bool], timeout_s: float = 20.0) -> None:
        """Wait until ``check()`` holds after some request; fail after ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            while not check():
                self.arrived.clear()
                await self.arrived.wait()


@asynccontextmanager
async def receiving(plan: Plan) -> AsyncIterator[Receiver]:
    """A receiver at ``receiver.url`` (``http://127.0.0.1:<port>/hook``)."""
    receiver = Receiver(plan)
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.url = f"http://127.0.0.1:{bound_port(runner)}/hook"
    try:
        yield receiver
    finally:
        await runner.cleanup()


class Numbers(Node):
    """Emits ``{"n": i}`` on ``event`` for i in ``range(count)``, then ends."""

    outputs: ClassVar[Mapping[str, str]] = {"event": "json"}

    def __init__(self, count: int = 10) -> None:
        self.count = count

    async def run(self, ctx: Context) -> None:
        for n in range(count_after(ctx, self.count)):
            await ctx.emit("event", {"n": n})


def count_after(ctx: Context, count: int) -> int:
    """How many to emit: ``count``, unless a crashed run already emitted some."""
    return count if ctx.more.latest("event") is None else 0
