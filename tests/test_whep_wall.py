"""The wall plays a camera over WebRTC (WHEP) in headless Chromium, and falls back to
LL-HLS where the server cannot answer an offer (issue 30)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from mediaflow.live.rtp import PLAYOUT_DELAY_URI, extension_id
from mediaflow.server.whep import WHEP as WHEP_KEY
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.whep_support import HEIGHT, WIDTH, served_camera

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.timeout(60)
VIDEO = 'video[data-transport="webrtc"]'


async def test_the_wall_plays_the_camera_over_webrtc(tmp_path: Path, page: Page) -> None:
    async with served_camera(tmp_path) as served:
        await page.goto(served.url + "/")
        await page.wait_for_selector(VIDEO, timeout=20_000)
        await page.wait_for_function(
            f"() => document.querySelector('{VIDEO}')?.videoWidth > 0", timeout=15_000
        )
        first = await page.evaluate(f"() => document.querySelector('{VIDEO}').currentTime")
        await asyncio.sleep(2)
        state = await page.evaluate(
            f"""() => {{ const v = document.querySelector('{VIDEO}'); return {{
                time: v.currentTime, width: v.videoWidth, height: v.videoHeight,
                frames: v.getVideoPlaybackQuality().totalVideoFrames,
                live: v.dataset.live, src: v.getAttribute("src") }}; }}"""
        )
        assert state["time"] > first + 1.0, state
        assert (state["width"], state["height"]) == (WIDTH, HEIGHT), state
        assert state["frames"] >= 15 and state["live"] == "playing", state
        service = served.runner.app[WHEP_KEY].service
        assert service is not None and len(service.sessions) == 1
        (session,) = service.sessions.values()
        assert session.audio is not None and session.audio.taken > 0  # its sound, as Opus
        # Chromium offered playout-delay; the answer agreed, so frames are not held back.
        assert extension_id(session.answer, "video", PLAYOUT_DELAY_URI) is not None
        assert page_errors(page) == []
        # Leaving the page ends the session (its DELETE, or its closed connection).
        await page.goto("about:blank")
        await asyncio.wait_for(_until(lambda: not service.sessions), 10)


async def test_the_wall_falls_back_to_ll_hls_when_webrtc_is_refused(
    tmp_path: Path, page: Page
) -> None:
    from mediaflow.server import ServerSettings

    async with served_camera(tmp_path, ServerSettings(whep_max_viewers=0), sound=False) as served:
        await page.goto(served.url + "/")
        await page.wait_for_function(
            "() => { const v = document.querySelector('video[data-live=\"playing\"]');"
            " return v && v.dataset.whepError && v.currentTime > 0; }",
            timeout=20_000,
        )
        error = await page.evaluate("() => document.querySelector('video').dataset.whepError")
        assert "503" in error
        # The refused POST is the one console error: the player went on with LL-HLS.
        assert all("503" in line for line in page_errors(page)), page_errors(page)


async def _until(predicate: object) -> None:
    assert callable(predicate)
    while not predicate():
        await asyncio.sleep(0.05)
