"""Players that are not ours watch the demo's camera live: VLC and hls.js (in Chromium).

The demo runs as a user starts it (``mediaflow demo --port 0``). VLC is Debian's and
runs as nobody (``tests/clients_support.py``); hls.js comes from the npm registry into
``.cache/hlsjs`` (``scripts/test`` installs it). Without either the test skips, which
fails the run in CI (``tests/ci_skips.py``).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import pytest

from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.clients_support import run_tool, tool, vlc_home, vlc_reports
from tests.demo_process import LIVE, Demo, demo_fixture, wait_for_playlist  # noqa: F401

if TYPE_CHECKING:
    from playwright.async_api import Page

WATCH_S = 6
FPS = 15  # the demo camera's
HLSJS = Path(__file__).parent.parent / ".cache/hlsjs/node_modules/hls.js/dist/hls.min.js"


async def test_vlc_plays_the_demo_camera_live(demo: Demo) -> None:
    cvlc = tool("cvlc")
    async with aiohttp.ClientSession() as session:
        await wait_for_playlist(session, demo.url)
    with vlc_home() as (prefix, env):
        done = await run_tool(
            *prefix, cvlc, "--intf", "luaintf", "--lua-intf", "mfprobe",
            "--vout", "dummy", "--aout", "dummy", "--no-video-title-show",
            f"--run-time={WATCH_S}", "--play-and-exit", f"{demo.url}{LIVE}.m3u8",
            env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reports = vlc_reports(done.stdout)
    playing = [r for r in reports if r.state == 2 and r.time > 0]
    assert playing, done.stdout[-3000:] + done.stderr[-3000:]
    # VLC knows no EXT-X-PART: it plays whole segments, each from a keyframe, so it
    # shows every frame from its first on.
    shown = max(r.displayed for r in reports)
    assert shown >= FPS * (WATCH_S - 3), (shown, done.stderr[-3000:])
    assert playing[-1].time - playing[0].time >= WATCH_S - 3


async def test_hls_js_plays_the_demo_camera_live_with_its_sound(demo: Demo, page: Page) -> None:
    path = os.environ.get("MEDIAFLOW_HLSJS") or str(HLSJS)
    if not Path(path).is_file():
        pytest.skip(f"hls.js not found at {path} (scripts/test installs it with npm)")
    async with aiohttp.ClientSession() as session:
        await wait_for_playlist(session, demo.url)
    await page.goto(demo.url + "/openapi.json")  # any page of the server: same origin
    await page.add_script_tag(path=path)
    await page.evaluate(
        """url => {
            const video = Object.assign(document.createElement("video"), { muted: true });
            document.body.append(video);
            const hls = new Hls();
            window.player = { hls, video, errors: [] };
            hls.on(Hls.Events.ERROR, (_, data) => window.player.errors.push(
                `${data.details}${data.fatal ? " (fatal)" : ""}`));
            hls.loadSource(url);
            hls.attachMedia(video);
            video.play().catch(() => {});
        }""",
        f"{LIVE}.m3u8",
    )
    await page.wait_for_function("() => window.player.video.currentTime > 0", timeout=20_000)
    first = await page.evaluate("() => window.player.video.currentTime")
    await asyncio.sleep(WATCH_S / 2)
    state = await page.evaluate(
        """() => { const { hls, video, errors } = window.player; return {
            time: video.currentTime, width: video.videoWidth, errors,
            frames: video.getVideoPlaybackQuality().totalVideoFrames,
            sound: video.webkitAudioDecodedByteCount, latency: hls.latency,
            parts: (hls.levels[0].details.partList || []).length,
            holdBack: hls.levels[0].details.partHoldBack }; }"""
    )
    assert state["errors"] == [], state
    assert state["time"] > first + 1.0 and state["width"] == 640, state
    assert state["frames"] >= FPS * (WATCH_S / 2 - 1) and state["sound"] > 0, state
    # Low-latency HLS: hls.js follows the parts, PART-HOLD-BACK (3 parts) behind the
    # newest; without them it would stay 3 target durations (2 s segments) behind.
    assert state["parts"] > 0 and 1.5 <= state["holdBack"] <= 1.7, state
    assert 0 < state["latency"] < 3.5, state
    assert page_errors(page) == []
