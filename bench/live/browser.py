"""Glass-to-glass latency in Chromium: the wall plays the camera live, frames say how late.

Headless Chromium (Debian's, driven by Playwright with the tests' flags:
:mod:`tests.browser`) opens the wall, waits until the camera's live ``<video>`` plays
(``data-live='playing'``) and shows frames, lets it settle for ``warmup_s``, then
empties the element's ``mediaflowLatencies`` and reads it again ``seconds`` later:
one latency per frame shown, the expected display time (requestVideoFrameCallback)
minus the frame's capture time. The player's jumps to live, its last error and the
frames Chromium dropped over the window come with it, and the flow's CPU over the
same window (one wall viewer: the live stream plus everything else the wall asks).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from bench._lib.sample import machine_busy, tree_cpu
from bench.live.cpu import Usage, finish
from bench.live.flow import CAMERA

VIDEO = f"[data-widget='{CAMERA}.video'] video"
START_TIMEOUT_MS = 45_000

STATE = """v => ({
  jumps: Number(v.dataset.jumps || 0),
  error: v.dataset.error || null,
  frames: v.getVideoPlaybackQuality().totalVideoFrames,
  dropped: v.getVideoPlaybackQuality().droppedVideoFrames,
  rate: v.playbackRate,
})"""


@dataclass
class BrowserResult:
    """One page's window; ``latencies`` in seconds, one per frame shown."""

    latencies: list[float] = field(default_factory=list)
    jumps: int = 0
    frames: int = 0
    dropped: int = 0
    player_error: str | None = None
    console_errors: list[str] = field(default_factory=list)
    usage: Usage | None = None
    error: str | None = None  # the page could not be measured at all


def unavailable() -> str | None:
    """Why Chromium cannot run here (no Playwright, no Chromium), or None."""
    from tests.browser import missing_reason

    return missing_reason()


async def wall_latency(url: str, *, warmup_s: float, seconds: float, pid: int) -> BrowserResult:
    """Open the wall at ``url`` and measure (module doc); ``pid`` is the flow's process.
    A page that never plays gives a result with ``error`` set."""
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import async_playwright

    from tests.browser import CHROMIUM_FLAGS, chromium_path

    result = BrowserResult()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True
        )
        try:
            page = await browser.new_page()
            page.on("console", lambda m: _console(result, m.type, m.text))
            page.on("pageerror", lambda exc: result.console_errors.append(f"uncaught: {exc}"))
            await page.goto(url + "/?live=hls")  # the LL-HLS view (WHEP is not benched yet)
            await page.wait_for_selector(f"{VIDEO}[data-live='playing']", timeout=START_TIMEOUT_MS)
            await page.wait_for_function(
                f'() => (document.querySelector("{VIDEO}").mediaflowLatencies || []).length > 0',
                timeout=START_TIMEOUT_MS,
            )
            await asyncio.sleep(warmup_s)
            before: dict[str, Any] = await page.eval_on_selector(
                VIDEO, f"v => {{ v.mediaflowLatencies.length = 0; return ({STATE})(v); }}"
            )
            start, cpu, busy = time.monotonic(), tree_cpu(pid), machine_busy()
            await asyncio.sleep(seconds)
            after: dict[str, Any] = await page.eval_on_selector(VIDEO, f"v => ({STATE})(v)")
            result.usage = finish(pid, start, cpu, busy)
            samples = await page.eval_on_selector(VIDEO, "v => v.mediaflowLatencies.slice()")
            result.latencies = [float(x) for x in samples]
            result.jumps = after["jumps"] - before["jumps"]
            result.frames = after["frames"] - before["frames"]
            result.dropped = after["dropped"] - before["dropped"]
            result.player_error = after["error"]
        except (PlaywrightError, OSError) as exc:
            result.error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        finally:
            await browser.close()
    return result


def _console(result: BrowserResult, kind: str, text: str) -> None:
    if kind == "error":
        result.console_errors.append(text)
