"""The wall's recording timeline in Chromium (issue 28, part 3): click an event and
the video shows the frame of that moment; playback goes on across clips and over a
gap; an evicted clip is drawn as such.

A lavfi camera (testsrc2: every frame differs) is recorded into three 4 s clips.
It runs faster than real time, so its clips' capture times reach past the end of
the run; the test lays them where the wall's default window shows them (one after
the other, ending a minute ago) by noting them again in a fresh timeline index.
What the page shows is compared with what PyAV decodes from the same clip.
"""

from __future__ import annotations

import base64
import fractions
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import av
import numpy as np
import pytest

from mediaflow import FlowBuilder
from mediaflow.media import MediaRef
from mediaflow.timeline import RecordedClip, TimelineEvent, TimelineIndex
from mediaflow.timeline.index import FILE_NAME
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.connector_helpers import MediaSink, run_flow
from tests.http_support import Served, serve

if TYPE_CHECKING:
    from playwright.async_api import Page

CAMERA = "lavfi:testsrc2=size=320x240:rate=15,trim=duration=12"
CLIP_S = 4.0
EVENT_AT_S = 2.03  # into the second clip: between two frames (15 fps), not on one
RECORDER = "[data-recorder='rec']"


@dataclass
class Recording:
    data_dir: Path
    clips: list[RecordedClip]
    data: list[bytes]


async def record(tmp_path: Path) -> Recording:
    flow = (
        FlowBuilder("walltl")
        .add("cam", "camera", device=CAMERA, fps=15, segment_s=2.0, realtime=False, video=True)
        .add("rec", "recorder", inputs={"video": "cam.video"}, clip_s=CLIP_S)
        .add("sink", MediaSink, inputs={"video": "rec.video"})
    )
    data_dir = tmp_path / "data"
    result = await run_flow(flow, data_dir, timeout=45)
    kept = result.port("video")
    assert len(kept) == 3
    for name in (FILE_NAME, FILE_NAME + "-wal", FILE_NAME + "-shm"):
        (data_dir / name).unlink(missing_ok=True)
    base = time.time() - 60 - CLIP_S * len(kept)
    clips = [
        RecordedClip(
            "walltl", "rec", base + CLIP_S * n, base + CLIP_S * (n + 1), item.ref, ("cam",)
        )
        for n, item in enumerate(kept)
    ]
    index = TimelineIndex.in_data_dir(data_dir)
    try:
        for clip in clips:
            index.note_clip(clip)
    finally:
        index.close()
    return Recording(data_dir, clips, [item.data for item in kept])


def frame_at(data: bytes, seconds: float) -> np.ndarray:
    """The RGB picture a player shows at ``seconds`` into the clip: the last frame
    that starts at or before it."""
    shown = None
    with av.open(io.BytesIO(data), "r") as container:
        for frame in container.decode(video=0):
            if frame.time is not None and frame.time > seconds + 1e-3:
                break
            shown = frame
    assert shown is not None
    picture: np.ndarray = shown.to_ndarray(format="rgb24")
    return picture


def frames(data: bytes) -> list[tuple[float, np.ndarray]]:
    """Every frame of the clip: its time and RGB picture."""
    with av.open(io.BytesIO(data), "r") as container:
        return [
            (float(f.time or 0.0), f.to_ndarray(format="rgb24")) for f in container.decode(video=0)
        ]


def jpeg_of(picture: np.ndarray) -> bytes:
    codec = av.CodecContext.create("mjpeg", "w")
    codec.height, codec.width = picture.shape[:2]
    codec.pix_fmt, codec.time_base = "yuvj420p", fractions.Fraction(1, 25)
    frame = av.VideoFrame.from_ndarray(picture, format="rgb24").reformat(format="yuvj420p")
    return b"".join(bytes(p) for p in (*codec.encode(frame), *codec.encode(None)))


async def note_motion(served: Served, recording: Recording) -> TimelineEvent:
    """A motion event inside the second clip, its snapshot the frame of that moment."""
    second = recording.clips[1]
    picture = frame_at(recording.data[1], EVENT_AT_S)
    snapshot: MediaRef = await served.state.store.save(jpeg_of(picture), "image/jpeg")
    start = second.start + EVENT_AT_S
    event = TimelineEvent("motion", "cam", start, start + 1.5, 0.3, snapshot)
    served.state.timeline.note_event("walltl", "motion", event)
    return event


# In the page: the first `seeked` of the recording's <video> after this runs, with
# the clip, the time and the picture shown then (drawn into a canvas, its RGBA in
# base64); the viewer pauses there, so the test looks at that moment at its pace.
WATCH_SEEK = """
(root) => {
  const video = document.querySelector(root + " video");
  window.__seeked = new Promise((resolve) => video.addEventListener("seeked", () => {
    const canvas = document.createElement("canvas");
    canvas.width = video.videoWidth;
    canvas.height = video.videoHeight;
    const context = canvas.getContext("2d");
    context.drawImage(video, 0, 0);
    const pixels = context.getImageData(0, 0, canvas.width, canvas.height).data;
    const time = video.currentTime;
    video.pause();
    let binary = "";
    for (let i = 0; i < pixels.length; i += 8192) {
      binary += String.fromCharCode(...pixels.subarray(i, i + 8192));
    }
    resolve({ digest: video.dataset.digest, time, width: canvas.width, height: canvas.height,
      pixels: btoa(binary) });
  }, { once: true }));
}
"""


PLAY_NEAR_END = """
(root) => {
  const video = document.querySelector(root + " video");
  video.currentTime = video.duration - 0.3;
  return video.play();
}
"""


def mean_difference(rgba: str, width: int, height: int, picture: np.ndarray) -> float:
    pixels = np.frombuffer(base64.b64decode(rgba), np.uint8)
    shown = pixels.reshape(height, width, 4)[:, :, :3].astype(np.int16)
    return float(np.abs(shown - picture.astype(np.int16)).mean())


async def open_wall(page: Page, served: Served) -> None:
    await page.goto(served.url + "/")
    await page.wait_for_selector(f"{RECORDER} .tl-span", timeout=10_000)


# In the page: for each clip, the time it was at when it started playing (the
# first `playing` event while it was loaded), kept from the moment this runs; so a
# clip that plays on past any bound before the test looks is still judged by where
# it began.
WATCH_STARTS = """
(root) => {
  const video = document.querySelector(root + " video");
  window.__starts = {};
  video.addEventListener("playing", () => {
    const digest = video.dataset.digest;
    if (!(digest in window.__starts)) window.__starts[digest] = video.currentTime;
  });
}
"""

# In the page: a click on the timeline a pixel into its first span, measured and
# clicked in one task, so that a refresh (which moves the spans as the window's end
# moves on) cannot come between where the span was and the click.
CLICK_FIRST_SPAN = """
(root) => {
  const span = document.querySelector(root + " .tl-span");
  const box = span.getBoundingClientRect();
  span.dispatchEvent(new MouseEvent("click", { bubbles: true, clientX: box.left + 1,
    clientY: box.top + 2 }));
}
"""


async def started_at(page: Page, digest: str) -> float:
    """Where in the clip ``digest`` the recording's video began playing it (needs
    WATCH_STARTS run before)."""
    await page.wait_for_function(
        "(digest) => window.__starts && digest in window.__starts",
        arg=digest,
        polling=50,
        timeout=10_000,
    )
    at: float = await page.evaluate("(digest) => window.__starts[digest]", digest)
    return at


async def test_clicking_an_event_shows_the_frame_of_that_moment_and_plays_on(
    tmp_path: Path, page: Page
) -> None:
    recording = await record(tmp_path)
    second, third = recording.clips[1], recording.clips[2]
    async with serve(recording.data_dir) as served:
        event = await note_motion(served, recording)
        await open_wall(page, served)
        item = page.locator(f"{RECORDER} .tl-event[data-type='motion']")
        await item.wait_for(timeout=12_000)  # the next refresh, or the first one
        assert await item.locator("img").get_attribute("src") == (
            f"/artifacts/{event.snapshot.digest}?type=image%2Fjpeg" if event.snapshot else None
        )
        assert "1.5 s" in await item.inner_text()

        await page.evaluate(WATCH_SEEK, RECORDER)
        await item.click()
        seeked: dict[str, Any] = await page.evaluate("window.__seeked")
        assert seeked["digest"] == second.ref.digest
        assert seeked["time"] == pytest.approx(event.start - second.start, abs=0.1)
        # The picture is the clip's frame of that moment: of all its frames, the one it
        # matches best is within a frame of it (the video plays on while the page
        # draws), far better than a frame a second away.
        shown = (seeked["pixels"], seeked["width"], seeked["height"])
        moment = event.start - second.start
        differences = [
            (mean_difference(*shown, picture), at) for at, picture in frames(recording.data[1])
        ]
        best, best_at = min(differences)
        far = mean_difference(*shown, frame_at(recording.data[1], moment + 1.0))
        assert abs(best_at - moment) <= 0.1 and best < 4 and best * 3 < far, (best, best_at, far)

        # The export range is a minute either side of the moment played.
        href = await page.get_attribute(f"{RECORDER} a.tl-export", "href")
        assert href is not None and href.startswith("/api/recordings/walltl/rec/export.mp4?")
        asked = dict(part.split("=") for part in href.split("?")[1].split("&"))
        assert float(asked["start"]) == pytest.approx(event.start - 60, abs=1)
        assert float(asked["end"]) == pytest.approx(event.start + 60, abs=1)

        # At the end of a clip the next one plays.
        await page.evaluate(WATCH_STARTS, RECORDER)
        await page.evaluate(PLAY_NEAR_END, RECORDER)
        assert await started_at(page, third.ref.digest) < 0.5  # from its first frame

        # Hovering the event's mark shows its snapshot.
        mark = page.locator(f"{RECORDER} .tl-mark[data-type='motion']")
        box = await mark.bounding_box()
        assert box is not None
        await page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        thumb = page.locator(f"{RECORDER} .tl-hover img")
        await thumb.wait_for(state="visible", timeout=2_000)
        assert event.snapshot and event.snapshot.digest in (await thumb.get_attribute("src") or "")
        assert not page_errors(page)


async def test_an_evicted_clip_is_a_gap_that_playback_jumps(tmp_path: Path, page: Page) -> None:
    recording = await record(tmp_path)
    first, second, third = recording.clips
    async with serve(recording.data_dir) as served:
        served.state.store.delete(second.ref.digest)  # the disk cap took it
        await open_wall(page, served)
        gap = page.locator(f"{RECORDER} .tl-gap[data-reason='evicted']")
        await gap.wait_for(timeout=5_000)
        assert await page.locator(f"{RECORDER} .tl-span").count() == 2
        assert await page.locator(f"{RECORDER} .tl-gap[data-reason='not recorded']").count() >= 1
        # Drawn where the second clip was: between the two spans.
        spans = [await s.bounding_box() for s in await page.locator(f"{RECORDER} .tl-span").all()]
        hole = await gap.bounding_box()
        assert spans[0] and spans[1] and hole
        assert spans[0]["x"] <= hole["x"] <= spans[1]["x"]

        # Clicking the first span plays it; at its end the third clip follows.
        await page.click(f"{RECORDER} button[data-zoom='600']")  # 1 s a pixel, not 6
        await page.wait_for_function(
            "(root) => document.querySelector(root + ' .tl-span').offsetWidth > 3",
            arg=RECORDER,
        )
        await page.evaluate(WATCH_STARTS, RECORDER)
        await page.evaluate(CLICK_FIRST_SPAN, RECORDER)
        assert await started_at(page, first.ref.digest) < 1.5  # a pixel in: about 1 s
        await page.evaluate(PLAY_NEAR_END, RECORDER)
        assert await started_at(page, third.ref.digest) < 0.5  # over the gap, from its start
        # The zoom choices read the timeline again, the playback goes on.
        await page.click(f"{RECORDER} button[data-zoom='21600']")
        await page.wait_for_selector(f"{RECORDER} button[data-zoom='21600'][aria-pressed='true']")
        await page.wait_for_timeout(300)
        assert await page.evaluate(
            "(root) => document.querySelector(root + ' video').dataset.digest", RECORDER
        ) == (third.ref.digest)
        assert not page_errors(page)


# The timeline's decisions (static/timeline-draw.js), as a table: two spans of
# clips (0-4, 4-8) and (20-24), an event with a snapshot at 5-6 and one without at 21.
DECISIONS = """
() => {
  const d = window.MediaflowWall.timelineDraw;
  const clip = (start) => ({ digest: `sha256:${start}`, start, end: start + 4 });
  const spans = [{ start: 0, end: 8, clips: [clip(0), clip(4)] },
    { start: 20, end: 24, clips: [clip(20)] }];
  const where = (t) => { const found = d.locate(spans, t);
    return found && [found.clip.start, Math.round(found.offset * 1000) / 1000]; };
  const next = (start) => { const c = d.following(spans, clip(start)); return c && c.start; };
  const events = [{ start: 5, end: 6, snapshot: { digest: "x" } },
    { start: 21, end: null, snapshot: null }];
  const near = (t, within) => {
    const e = d.nearestSnapshot(events, t, within);
    return e && e.start;
  };
  const hour = 1796565600; // 2026-12-06T14:00:00Z
  return {
    locate: [-1, 0, 5.5, 7.999, 8, 12, 23, 24].map(where),
    following: [next(0), next(4), next(20)],
    nearest: [near(5.5, 1), near(8, 1), near(8, 2.5), near(21, 10)],
    ticks: d.ticks(hour - 1, hour + 3600).map((tick) => tick.t - hour),
    fraction: d.fraction(hour + 900, { start: hour, end: hour + 3600 }),
  };
}
"""


async def test_the_timeline_decisions(tmp_path: Path, page: Page) -> None:
    async with serve(tmp_path) as served:
        await page.goto(served.url + "/")
        await page.wait_for_function("() => window.MediaflowWall && window.MediaflowWall.timeline")
        got = await page.evaluate(DECISIONS)
        assert not page_errors(page)
    # Before the recording and in a gap: the next clip from its start; past the end: none.
    assert got["locate"] == [[0, 0], [0, 0], [4, 1.5], [4, 3.999], [20, 0], [20, 0], [20, 3], None]
    assert got["following"] == [4, 20, None]  # across the gap, then the end
    assert got["nearest"] == [5, None, 5, None]  # only events with a snapshot
    # The browser's zone is UTC here or whole hours off it: the hour is a tick, every 10 min.
    assert got["ticks"] == [0, 600, 1200, 1800, 2400, 3000]
    assert got["fraction"] == 0.25
