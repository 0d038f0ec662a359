"""Chromium publishes into a ``webrtc`` node from the wall's "use this device's camera"
button (getUserMedia with Chromium's fake camera and microphone, RTCPeerConnection,
fetch POST /whip/...), and the flow records a clip with its picture and sound."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import av
import pytest

from mediaflow import FlowBuilder
from tests.browser import CHROMIUM_FLAGS, chromium_path, missing_reason
from tests.connector_helpers import MediaSink
from tests.whip_helpers import TOKEN, whip_rig

if TYPE_CHECKING:
    from playwright.async_api import Browser

pytest.importorskip("aiortc")
pytestmark = pytest.mark.timeout(90)
# A camera and a microphone without hardware or a permission prompt.
MEDIA_FLAGS = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]


@pytest.fixture(name="media_browser")
async def media_browser_fixture() -> AsyncIterator[Browser]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_FLAGS + MEDIA_FLAGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


async def test_chromium_publishes_from_the_wall_and_a_clip_is_recorded(
    tmp_path: Path, media_browser: Browser
) -> None:
    flow = (
        FlowBuilder("browser")
        .add("phone", "webrtc", fps=5, segment_s=1.0, video=True)
        .add("rec", "recorder", inputs={"video": "phone.video", "audio": "phone.audio"}, clip_s=2)
        .add("sink", MediaSink, inputs={"image": "phone.image", "audio": "phone.audio"})
        .add("clips", MediaSink, inputs={"video": "rec.video"})
    )
    async with whip_rig(flow, tmp_path) as rig:
        page = await media_browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(rig.url("/"))
        # The token the wall keeps for writes (control.js reads it from /#token=...).
        await page.evaluate("(t) => sessionStorage.setItem('mediaflow-token', t)", TOKEN)
        button = page.locator("section[data-flow=browser] button.publish")
        await button.click(timeout=15_000)
        await page.wait_for_function(
            "() => document.querySelector('button.publish').textContent === 'stop publishing'",
            timeout=15_000,
        )
        await rig.until(
            lambda: (
                len(rig.received("image")) >= 3
                and len(rig.received("audio")) >= 10
                and len(rig.received("video", "clips")) >= 1
            ),
            timeout=30,
        )
        await button.click()  # stop: DELETE, the device is lost
        await rig.until(lambda: rig.events("device_lost"), timeout=10)
        assert errors == []
        image = rig.received("image")[-1]
        clip = rig.received("video", "clips")[0]
    assert image.ref.media_type == "image/jpeg" and image.ref.meta["width"] > 0
    with av.open(io.BytesIO(clip.data)) as container:
        assert container.streams.video and container.streams.audio
        assert len(list(container.decode(video=0))) >= 10
