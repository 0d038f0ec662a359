"""A webhook receiver, a process of its own: ``python -m bench.sinks.receiver``.

aiohttp on a free loopback port; it prints ``listening on URL`` once it listens.

- ``POST /hook``: answers the status ``PUT /answer?status=N`` set last (200 at
  first). An answer of 2xx records the item: its ``n`` (the event's), whether the
  body said it was a redelivery, and whether ``X-Mediaflow-Signature`` is the
  HMAC-SHA256 of the body under ``--secret`` (checked for every request, as a
  receiver would, so both the sink and the bare client pay for it).
- ``GET /report``: ``{"requests", "answers": {status: count}, "delivered": [[n,
  redelivery, verified], ...], "first_2xx_after_answer": seconds or null}``, the
  last from the latest ``PUT /answer`` to the first 2xx after it.
- ``POST /reset``: forget what was recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import time
from collections import Counter
from typing import Any

from aiohttp import web

from bench._lib.loop import run_async

SIGNATURE_HEADER = "X-Mediaflow-Signature"


def sign(secret: bytes, body: bytes) -> str:
    """The signature header's value a sender gives ``body``: ``sha256=<hex>``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


class Records:
    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.answer = 200
        self.answer_set_at = time.monotonic()
        self.first_2xx: float | None = None
        self.requests = 0
        self.answers: Counter[int] = Counter()
        self.delivered: list[tuple[Any, bool, bool]] = []

    async def hook(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests += 1
        header = request.headers.get(SIGNATURE_HEADER, "")
        verified = hmac.compare_digest(sign(self.secret, body), header)
        status = self.answer
        self.answers[status] += 1
        if 200 <= status < 300:
            sent = json.loads(body)
            self.delivered.append((sent["value"]["n"], bool(sent.get("redelivery")), verified))
            if self.first_2xx is None:
                self.first_2xx = time.monotonic() - self.answer_set_at
        return web.Response(status=status, text="ok" if status < 300 else "no")

    async def set_answer(self, request: web.Request) -> web.Response:
        self.answer = int(request.query["status"])
        self.answer_set_at, self.first_2xx = time.monotonic(), None
        return web.Response(text="set")

    async def report(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "requests": self.requests,
                "answers": {str(k): v for k, v in self.answers.items()},
                "delivered": self.delivered,
                "first_2xx_after_answer": self.first_2xx,
            }
        )

    async def reset(self, request: web.Request) -> web.Response:
        self.requests, self.delivered, self.first_2xx = 0, [], None
        self.answers.clear()
        return web.Response(text="reset")


async def serve(secret: str) -> None:
    records = Records(secret.encode())
    app = web.Application()
    app.router.add_post("/hook", records.hook)
    app.router.add_put("/answer", records.set_answer)
    app.router.add_get("/report", records.report)
    app.router.add_post("/reset", records.reset)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.sinks.receiver")
    p.add_argument("--secret", required=True)
    args = p.parse_args()
    run_async(serve(args.secret))


if __name__ == "__main__":
    main()
