"""Viewers of the demo's live camera that stall, come and go: capture and recording never
notice, and a viewer that stopped reading comes back at live.

The demo runs as a user starts it (``mediaflow demo --port 0``): a 15 frames/s camera
whose live view carries the microphone's sound, a recorder cutting 4 s clips of both.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from bench.live.hls import parse_playlist
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.demo_process import LIVE, Demo, demo_fixture, wait_for_playlist  # noqa: F401

if TYPE_CHECKING:
    from playwright.async_api import Page, Route

STALL_S = 10.0
# Newest keyframe part to now: up to a 2 s GOP, a 0.5 s part, the encoder's 3 frames.
LIVE_WITHIN_S = 3.5


def listed(text: str) -> list[tuple[int, float, bool]]:
    """(seq, capture time, starts with a keyframe) of each part in a playlist."""
    parts = parse_playlist(text).parts
    assert all(part.pdt is not None for part in parts), text
    return [(part.seq, part.pdt or 0.0, part.independent) for part in parts]


async def test_a_reader_that_stops_for_ten_seconds_resumes_at_live(demo: Demo) -> None:
    async with aiohttp.ClientSession() as session:
        await wait_for_playlist(session, demo.url)
        async with session.get(f"{demo.url}{LIVE}.m3u8") as resp:
            parts = listed(await resp.text())
        newest = parts[-1][0]
        async with session.get(f"{demo.url}{LIVE}/{newest}.m4s") as resp:
            assert resp.status == 200
        await asyncio.sleep(STALL_S)  # the reader stops: nothing waits for it
        asked = time.monotonic()
        async with session.get(f"{demo.url}{LIVE}.m3u8?after={newest}") as resp:
            resumed = listed(await resp.text())
        assert time.monotonic() - asked < 0.5  # newer parts exist: no hold
        # What it missed left the window: it starts again at the newest keyframe part.
        assert resumed[0][0] > newest + 1 and resumed[0][2]
        async with session.get(f"{demo.url}{LIVE}/{newest + 1}.m4s") as resp:
            assert resp.status == 404 and "not in the live window" in (await resp.json())["error"]
        start = max(p for p in resumed if p[2])
        assert time.time() - start[1] < LIVE_WITHIN_S, resumed
        async with session.get(f"{demo.url}{LIVE}/{start[0]}.m4s") as resp:
            assert resp.status == 200 and len(await resp.read()) > 1000


CAMERA_VIDEO = "[data-widget='cam.video'] video"


async def test_the_wall_stalled_for_ten_seconds_plays_live_again(demo: Demo, page: Page) -> None:
    async with aiohttp.ClientSession() as session:
        await wait_for_playlist(session, demo.url)
    stalled = asyncio.Event()
    resume = asyncio.Event()

    async def hold(route: Route) -> None:
        if stalled.is_set():
            await resume.wait()  # the tab's network stalls: its requests wait
        await route.continue_()

    await page.route("**/live/**", hold)
    await page.goto(demo.url + "/?live=hls")  # the LL-HLS player, not WebRTC
    await page.wait_for_function(
        f'() => Number(document.querySelector("{CAMERA_VIDEO}")?.dataset.latency) < 2.5',
        timeout=30_000,
    )
    stalled.set()
    await asyncio.sleep(STALL_S)
    behind = float(await page.eval_on_selector(CAMERA_VIDEO, "v => v.dataset.latency"))
    assert behind > STALL_S - 3, behind  # the picture froze while the network was held
    stalled.clear()
    resume.set()
    await page.wait_for_function(
        f'() => Number(document.querySelector("{CAMERA_VIDEO}").dataset.latency) < 2.5',
        timeout=15_000,
    )
    state = await page.eval_on_selector(
        CAMERA_VIDEO,
        "v => ({jumps: Number(v.dataset.jumps), error: v.dataset.error || null, paused: v.paused})",
    )
    assert state["jumps"] >= 1 and not state["paused"], state  # it skipped what it missed
    # A part asked for before the stall had left the window when the answer came: the
    # 404 the browser logs is how the player learns it must skip.
    assert [e for e in page_errors(page) if "404 (Not Found)" not in e] == []


VIEWERS = 10
ROUNDS_S = 12.0
CLIP_FRAMES = 4 * 15  # the demo's 4 s clips of a 15 frames/s camera


async def view(url: str, until: float, rng: random.Random, read: list[int]) -> None:
    """One player after another: each reads the live stream a little, then leaves,
    sometimes in the middle of a part."""
    while time.monotonic() < until:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}{LIVE}.m3u8") as resp:
                parts = listed(await resp.text())
            next_seq = max(p for p in parts if p[2])[0]
            leave_at = time.monotonic() + rng.uniform(0.5, 2.5)
            while time.monotonic() < leave_at:
                async with session.get(f"{url}{LIVE}/{next_seq}.m4s") as resp:
                    if rng.random() < 0.1:
                        break  # gone mid-part: the connection closes unread
                    read[0] += len(await resp.read())
                async with session.get(f"{url}{LIVE}.m3u8?after={next_seq}") as resp:
                    newer = [p[0] for p in listed(await resp.text()) if p[0] > next_seq]
                next_seq = newer[0] if newer else next_seq


def metric(metrics: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", metrics, re.MULTILINE)
    assert found, name
    return float(found.group(1))


async def clips_and_losses(url: str) -> tuple[dict[int, dict[str, Any]], list[float]]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/api/flows/demo") as resp:
            flow = await resp.json()
        async with session.get(f"{url}/metrics") as resp:
            metrics = await resp.text()
    clips = {}
    for node in flow["nodes"]:
        latest = node["outputs"].get("video", {}).get("latest") if node["id"] == "rec" else None
        if latest is not None:
            clips[int(latest["meta"]["seq"])] = latest["meta"]
    losses = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("mediaflow_capture_losses{") and 'node="cam"' in line
    ]
    return clips, losses


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]


async def test_ten_viewers_come_and_go_while_the_camera_records(demo: Demo) -> None:
    clips: dict[int, dict[str, Any]] = {}
    async with aiohttp.ClientSession() as session:
        await wait_for_playlist(session, demo.url)
    deadline = time.monotonic() + 60
    while len(clips) < 2:  # recording, before any viewer
        assert time.monotonic() < deadline, f"two clips not recorded in 60 s: {sorted(clips)}"
        found, _ = await clips_and_losses(demo.url)
        clips |= found
        await asyncio.sleep(0.5)
    before = rss_mib(demo.pid)
    first_with_viewers = max(clips) + 1
    read = [0]
    rng = random.Random(15)
    until = time.monotonic() + ROUNDS_S
    viewers = [asyncio.create_task(view(demo.url, until, rng, read)) for _ in range(VIEWERS)]
    while not all(v.done() for v in viewers):
        found, losses = await clips_and_losses(demo.url)
        clips |= found
        await asyncio.sleep(0.5)
    await asyncio.gather(*viewers)
    after = rss_mib(demo.pid)
    async with aiohttp.ClientSession() as session, session.get(f"{demo.url}/metrics") as resp:
        metrics = await resp.text()
    # Watched: the microphone's sound was encoded for them, none of it left out.
    assert metric(metrics, 'mediaflow_live_watched{flow="demo",node="cam"}') == 1
    assert metric(metrics, 'mediaflow_live_sound_encoded_frames_total{flow="demo",node="mic"}') > 0
    assert metric(metrics, 'mediaflow_live_sound_dropped_chunks_total{flow="demo",node="mic"}') == 0
    deadline = time.monotonic() + 60
    while max(clips) < first_with_viewers + 2:  # the clips recorded while they watched
        assert time.monotonic() < deadline, f"recording stalled: {sorted(clips)}"
        found, losses = await clips_and_losses(demo.url)
        clips |= found
        await asyncio.sleep(0.5)
    assert read[0] > VIEWERS * 100_000  # they did watch
    assert all(loss == 0 for loss in losses), losses  # not a frame skipped at capture
    seqs = sorted(clips)
    assert seqs == list(range(seqs[0], seqs[-1] + 1))  # no clip missing
    for seq in seqs:
        meta = clips[seq]
        # Every clip as without viewers: 4 s, every frame, with its sound.
        assert (meta["frames"], meta["duration"], meta["audio_codec"]) == (CLIP_FRAMES, 4.0, "aac")
    # Each viewer's state is a few requests; the window of parts is fixed.
    assert after - before < 32, (before, after)
