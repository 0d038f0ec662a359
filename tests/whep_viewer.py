"""A WHEP viewer in a process of its own (``python -m tests.whep_viewer URL``): aiortc
offers, receives the camera, prints ``watching`` once frames arrive, then goes on
until killed. The fault tests stop it (SIGSTOP) to make a viewer that never reads."""

from __future__ import annotations

import asyncio
import sys

import aiohttp

from tests.whep_support import watch


async def main(url: str) -> None:
    async with aiohttp.ClientSession() as client:
        viewer = await watch(client, url, audio=False)
        while len(viewer.sizes) < 5:
            await asyncio.sleep(0.05)
        print("watching", viewer.location, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
