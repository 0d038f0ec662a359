"""The wall in a real browser (Chromium via Playwright) next to a real running flow:
image frames update, a recorded H.264/AAC clip plays and seeks (served with 206),
transcripts and status events show up. Media are made with PyAV in the test."""

from __future__ import annotations

import asyncio
import fractions
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import av
import numpy as np

from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.config import EngineSettings
from mediaflow.server import ServerSettings
from mediaflow.server.state import AppState
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.http_support import serve

if TYPE_CHECKING:
    from playwright.async_api import Page

FRAMES = 60
FRAME_PERIOD_S = 0.25


def make_jpeg(i: int, width: int = 96, height: int = 64) -> bytes:
    codec = av.CodecContext.create("mjpeg", "w")
    codec.width, codec.height, codec.pix_fmt = width, height, "yuvj420p"
    codec.time_base = fractions.Fraction(1, 25)
    rgb = np.zeros((height, width, 3), np.uint8)
    rgb[:, : (i * 7) % width + 1] = (40 * i % 255, 120, 200)
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuvj420p")
    return b"".join(bytes(p) for p in (*codec.encode(frame), *codec.encode(None)))


def make_clip(path: Path, seconds: float = 2.0) -> None:
    """A plain (faststart) MP4: H.264 with a keyframe every 0.5 s, and AAC mono."""
    rate, sample_rate, block = 24, 44100, 1024
    with av.open(str(path), "w", options={"movflags": "faststart"}) as out:
        video = out.add_stream("libx264", rate=rate)
        video.width, video.height, video.pix_fmt = 160, 120, "yuv420p"
        video.options = {"preset": "ultrafast", "g": "12"}
        audio = out.add_stream("aac", rate=sample_rate)
        for i in range(int(seconds * rate)):
            frame = av.VideoFrame.from_ndarray(
                np.full((120, 160, 3), (i * 9) % 255, np.uint8), format="rgb24"
            )
            frame.pts, frame.pict_type = i, 0  # NONE: let the encoder choose (STACK.md)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        for k in range(int(seconds * sample_rate / block)):
            t = np.arange(k * block, (k + 1) * block) / sample_rate
            tone = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32).reshape(1, -1)
            chunk = av.AudioFrame.from_ndarray(tone, format="fltp", layout="mono")
            chunk.sample_rate, chunk.pts = sample_rate, k * block
            out.mux(audio.encode(chunk))
        out.mux(audio.encode(None))


class WallSource(Node):
    """A clip on ``video``, then a JPEG and a caption every 250 ms until stopped."""

    outputs: ClassVar[Mapping[str, str]] = {"image": "image", "video": "video", "text": "text"}
    clip: ClassVar[Path | None] = None

    async def run(self, ctx: Context) -> None:
        assert WallSource.clip is not None
        clip = await ctx.save_artifact(WallSource.clip, "video/mp4", meta={"duration": 2.0})
        await ctx.emit("video", clip)
        for i in range(FRAMES):
            if ctx.stopping():
                return
            ref = await ctx.save_artifact(make_jpeg(i), "image/jpeg", meta={"seq": i})
            await ctx.emit("image", ref)
            await ctx.emit("text", f"caption {i}")
            await asyncio.sleep(FRAME_PERIOD_S)


async def js(tab: Page, expression: str, arg: object = None) -> object:
    return await tab.evaluate(expression, arg)


async def test_the_wall_shows_a_running_flow(tmp_path: Path, page: Page) -> None:
    WallSource.clip = tmp_path / "clip.mp4"
    make_clip(WallSource.clip)
    spec = FlowBuilder("wall").add("cam", WallSource).build()
    session = FlowSession(spec, tmp_path / "data", settings=EngineSettings(backlog_interval_s=0.2))
    await session.start()
    try:
        state = AppState.for_session(session, settings=ServerSettings())
        async with serve(tmp_path, state=state) as served:
            await page.goto(served.url + "/")
            await page.wait_for_selector("[data-widget='cam.image'] img[src]", timeout=15_000)

            # The image widget follows the frames (it polls, or takes `latest` events).
            image = "[data-widget='cam.image'] img"
            first = await page.get_attribute(image, "data-digest")
            await page.wait_for_function(
                f'(d) => document.querySelector("{image}").dataset.digest !== d',
                arg=first,
                timeout=10_000,
            )
            await page.wait_for_function(
                f'() => document.querySelector("{image}").naturalWidth === 96', timeout=10_000
            )

            # The clip: listed, loaded, played and seeked (Chromium asks for ranges).
            video = "[data-widget='cam.video'] video"
            await page.wait_for_selector("[data-widget='cam.video'] .clips button", timeout=10_000)
            clip_digest = await page.get_attribute(
                "[data-widget='cam.video'] .clips button", "data-digest"
            )
            await page.click("[data-widget='cam.video'] .clips button")
            await page.wait_for_function(
                f'() => document.querySelector("{video}").readyState >= 2', timeout=15_000
            )
            duration = await js(page, f'() => document.querySelector("{video}").duration')
            assert isinstance(duration, int | float) and 1.9 < duration < 2.1
            seeked_to = await js(
                page,
                f"""async () => {{
                    const v = document.querySelector("{video}");
                    await new Promise((done) => {{
                        v.addEventListener("seeked", done, {{ once: true }});
                        v.currentTime = 1.5;
                    }});
                    return v.currentTime;
                }}""",
            )
            assert isinstance(seeked_to, int | float) and abs(seeked_to - 1.5) < 0.1
            await js(page, f'() => document.querySelector("{video}").play()')
            await page.wait_for_function(
                f'() => document.querySelector("{video}").currentTime > 1.6', timeout=10_000
            )
            clip_statuses = served.statuses(f"/artifacts/{clip_digest}")
            assert 206 in clip_statuses, clip_statuses

            # Text: captions from the text port, transcripts from events.
            await page.wait_for_selector("[data-widget='cam.text'] .lines li", timeout=10_000)
            session.bus.publish("transcript", {"flow": "wall", "node": "asr", "text": "hello wall"})
            session.bus.publish("transcript", {"flow": "wall", "node": "cam", "text": "cam said"})
            await page.wait_for_selector(".transcript-lines li:has-text('wall/asr: hello wall')")
            await page.wait_for_selector("[data-widget='cam.text'] li:has-text('cam said')")

            # The status strip.
            session.bus.publish("engine_degraded", {"flow": "wall", "backlog": 1234})
            session.bus.publish(
                "device_lost", {"flow": "wall", "node": "cam", "error": "unplugged"}
            )
            session.bus.publish(
                "cascade_dropped", {"flow": "wall", "node": "cam", "reason": "boom"}
            )
            for event_type in ("engine_degraded", "device_lost", "cascade_dropped"):
                await page.wait_for_selector(f".chip[data-type='{event_type}']", timeout=5_000)
            strip = await page.inner_text("#strip")
            assert "backlog 1234" in strip and "unplugged" in strip and "boom" in strip

            # A `latest` event (when the engine publishes them) updates the widget at once.
            # Every digest the widget shows is recorded: the camera's next frame, a
            # quarter second later, may replace this one before a poll would see it.
            await js(
                page,
                f"""() => {{
                    const img = document.querySelector("{image}");
                    window.shownDigests = [];
                    new MutationObserver(() => window.shownDigests.push(img.dataset.digest))
                        .observe(img, {{ attributes: true, attributeFilter: ["data-digest"] }});
                }}""",
            )
            pushed = await served.state.store.save(make_jpeg(99), "image/jpeg")
            session.bus.publish(
                "latest",
                {"flow": "wall", "node": "cam", "port": "image", "value": pushed.to_json()},
            )
            await page.wait_for_function(
                "(d) => window.shownDigests.includes(d)", arg=pushed.digest, timeout=10_000
            )

            if shot := os.environ.get("MEDIAFLOW_WALL_SCREENSHOT"):
                await page.screenshot(path=shot, full_page=True)
            assert page_errors(page) == []
    finally:
        await session.stop()
