"""Glass-to-glass latency in Chromium: the wall plays the camera live, frames say how late.

Headless Chromium (Debian's, driven by Playwright with the tests' flags:
:mod:`tests.browser`) opens the wall, waits until the camera's live ``<video>`` plays
(``data-live='playing'``) and shows frames, lets it settle for ``warmup_s``, then
measures ``seconds``: one latency per frame shown, the expected display time
(requestVideoFrameCallback) minus the frame's capture time. Two players:

- ``hls``: the wall opened as ``/?live=hls`` plays LL-HLS (``live.js``), which knows
  each frame's capture time and keeps the latencies in ``mediaflowLatencies``; the
  window empties it and reads it again at its end.
- ``webrtc``: the wall as it opens by default plays over WHEP (``whep.js``); the video
  must say ``data-transport='webrtc'`` at both ends of the window (a fallback to
  LL-HLS is an error, with the page's reason). The page records each frame shown and
  :func:`bench.live.webrtc.derive` finds its capture time from the flashes; Chromium's
  own inbound-rtp statistics over the window come with it.

The player's jumps to live, its last error and the frames Chromium dropped over the
window come with it, and the flow's CPU over the same window (one wall viewer: the
live stream plus everything else the wall asks). The page is left (``about:blank``)
before the browser closes, so a WebRTC player ends its session (``DELETE``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from bench._lib.sample import machine_busy, tree_cpu
from bench.live.cpu import Usage, finish
from bench.live.flow import CAMERA
from bench.live.webrtc import COLLECT, KEEP_PCS, STATS, derive

VIDEO = f"[data-widget='{CAMERA}.video'] video"
START_TIMEOUT_MS = 45_000

STATE = """v => ({
  transport: v.dataset.transport || "hls",
  whepError: v.dataset.whepError || null,
  jumps: Number(v.dataset.jumps || 0),
  error: v.dataset.error || null,
  frames: v.getVideoPlaybackQuality().totalVideoFrames,
  dropped: v.getVideoPlaybackQuality().droppedVideoFrames,
  rate: v.playbackRate,
})"""


@dataclass
class BrowserResult:
    """One page's window; ``latencies`` in seconds, one per frame shown."""

    transport: str = "hls"  # the player asked for
    latencies: list[float] = field(default_factory=list)
    # WebRTC only (bench.live.webrtc): the latency's two halves per frame, the flashes
    # that placed the stream on the capture clock, and Chromium's inbound-rtp deltas.
    to_browser: list[float] = field(default_factory=list)
    in_browser: list[float] = field(default_factory=list)
    flashes: int = 0
    origin_spread: float | None = None
    rtp_stats: dict[str, float] = field(default_factory=dict)
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


async def wall_latency(
    url: str,
    *,
    warmup_s: float,
    seconds: float,
    pid: int,
    transport: str = "hls",
    anchor: float | None = None,
) -> BrowserResult:
    """Open the wall at ``url`` and measure (module doc) with the ``transport`` player
    (``hls`` or ``webrtc``); ``pid`` is the flow's process, ``anchor`` the camera's
    ``captured_at - pts`` (needed for ``webrtc``). A page that never plays, or plays
    the other player, gives a result with ``error`` set."""
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import async_playwright

    from tests.browser import CHROMIUM_FLAGS, chromium_path

    result = BrowserResult(transport=transport)
    webrtc = transport == "webrtc"
    if webrtc and anchor is None:
        return BrowserResult(transport=transport, error="no capture anchor for the camera")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True
        )
        try:
            page = await browser.new_page()
            page.on("console", lambda m: _console(result, m.type, m.text))
            page.on("pageerror", lambda exc: result.console_errors.append(f"uncaught: {exc}"))
            if webrtc:
                await page.add_init_script(KEEP_PCS)
            await page.goto(url + ("/" if webrtc else "/?live=hls"))
            await page.wait_for_selector(f"{VIDEO}[data-live='playing']", timeout=START_TIMEOUT_MS)
            if webrtc:
                await page.eval_on_selector(VIDEO, COLLECT)
                samples_js = "v => v.mediaflowFrames"
            else:
                samples_js = "v => v.mediaflowLatencies"
            await page.wait_for_function(
                f'() => (({samples_js})(document.querySelector("{VIDEO}")) || []).length > 0',
                timeout=START_TIMEOUT_MS,
            )
            await asyncio.sleep(warmup_s)
            reset = COLLECT if webrtc else "v => { v.mediaflowLatencies.length = 0; }"
            await page.eval_on_selector(VIDEO, reset)
            before: dict[str, Any] = await page.eval_on_selector(VIDEO, f"v => ({STATE})(v)")
            stats_before = await page.evaluate(STATS) if webrtc else []
            start, cpu, busy = time.monotonic(), tree_cpu(pid), machine_busy()
            await asyncio.sleep(seconds)
            after: dict[str, Any] = await page.eval_on_selector(VIDEO, f"v => ({STATE})(v)")
            result.usage = finish(pid, start, cpu, busy)
            samples = await page.eval_on_selector(VIDEO, f"v => ({samples_js})(v).slice()")
            if webrtc:
                stats_after = await page.evaluate(STATS)
                result.rtp_stats = _delta(stats_before, stats_after)
                _take_frames(result, samples, anchor or 0.0, before, after)
            else:
                result.latencies = [float(x) for x in samples]
            result.jumps = after["jumps"] - before["jumps"]
            result.frames = after["frames"] - before["frames"]
            result.dropped = after["dropped"] - before["dropped"]
            result.player_error = after["error"]
            await page.goto("about:blank")  # pagehide: a WebRTC player DELETEs its session
        except (PlaywrightError, OSError) as exc:
            result.error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        finally:
            await browser.close()
    return result


def _take_frames(
    result: BrowserResult,
    frames: list[list[float]],
    anchor: float,
    before: dict[str, Any],
    after: dict[str, Any],
) -> None:
    """The WebRTC window's frames into ``result``; the wrong player is an error."""
    for end in (before, after):
        if end["transport"] != "webrtc":
            reason = end["whepError"] or "no reason given"
            result.error = f"the wall played {end['transport']}, not WebRTC: {reason}"
            return
    derived = derive(frames, anchor)
    result.error = derived.error
    result.latencies = derived.latencies
    result.to_browser, result.in_browser = derived.to_browser, derived.in_browser
    result.flashes, result.origin_spread = derived.flashes, derived.origin_spread


def _delta(before: list[dict[str, float]], after: list[dict[str, float]]) -> dict[str, float]:
    """The first inbound video's statistics over the window (after - before)."""
    if not after:
        return {}
    first = before[0] if before else {}
    return {key: value - first.get(key, 0.0) for key, value in after[0].items()}


def _console(result: BrowserResult, kind: str, text: str) -> None:
    if kind == "error":
        result.console_errors.append(text)
