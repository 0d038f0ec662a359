"""The demo's camera, live over HLS: ffmpeg watches it for a few seconds without an error.

The demo runs as a user starts it (``mediaflow demo --port 0``); its camera's H.264
segments feed the live window (no second encode). ffmpeg is Debian's; without it the
test skips, which fails the run in CI (``tests/ci_skips.py``).
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import av
import pytest

from mediaflow.live.parts import VideoFrame
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.demo_process import (  # noqa: F401 - fixtures
    LIVE,
    demo_fixture,
    demo_url_fixture,
    wait_for_playlist,
)
from tests.http_support import serve, wait_until
from tests.links_support import BEARER, LOCKED, as_link, call, create, hold, save
from tests.live_helpers import FPS, EncodedVideo, encode_video

if TYPE_CHECKING:
    from playwright.async_api import Page

WATCH_S = 4.0


def parts_of(playlist: str, segment_uri: str) -> list[int]:
    """The parts a playlist lists for a finished segment: the EXT-X-PART lines from its
    EXT-X-PROGRAM-DATE-TIME to its URI."""
    lines = playlist.splitlines()
    end = lines.index(segment_uri)
    start = max(i for i in range(end) if lines[i].startswith("#EXT-X-PROGRAM-DATE-TIME:"))
    found = (re.search(r'URI="cam/(\d+)\.m4s"', line) for line in lines[start:end])
    return [int(match.group(1)) for match in found if match]


async def test_ffmpeg_watches_the_demo_camera_live(demo_url: str, tmp_path: Path) -> None:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("ffmpeg is not installed (apt-get install ffmpeg)")
    async with aiohttp.ClientSession() as session:
        text = await wait_for_playlist(session, demo_url)
        lines = text.splitlines()
        assert lines[:2] == ["#EXTM3U", "#EXT-X-VERSION:9"]
        assert '#EXT-X-MAP:URI="cam/init.mp4"' in lines
        stamps = [line for line in lines if line.startswith("#EXT-X-PROGRAM-DATE-TIME:")]
        parts = [int(n) for n in re.findall(r'#EXT-X-PART:.*URI="cam/(\d+)\.m4s"', text)]
        listed = [int(n) for n in re.findall(r"^cam/segment/(\d+)\.m4s$", text, re.MULTILINE)]
        # finished segments, and the one in progress by its parts alone
        assert listed and len(stamps) == len(listed) + 1, text
        first = parts[0]
        # A blocking reload: held until a newer part exists, then it is listed.
        newest = parts[-1]
        async with session.get(f"{demo_url}{LIVE}.m3u8?after={newest}") as resp:
            assert f"cam/{newest + 1}.m4s" in await resp.text()
        # Low-latency HLS's: held until the next segment's first part exists.
        wanted = listed[-1] + 2
        async with session.get(f"{demo_url}{LIVE}.m3u8?_HLS_msn={wanted}&_HLS_part=0") as resp:
            held = await resp.text()
        assert "#EXT-X-MEDIA-SEQUENCE:" in held and f"cam/segment/{wanted - 1}.m4s" in held
        # A finished segment is its parts back to back.
        done = [int(n) for n in re.findall(r"^cam/segment/(\d+)\.m4s$", held, re.MULTILINE)]
        async with session.get(f"{demo_url}{LIVE}/segment/{done[-1]}.m4s") as resp:
            assert resp.status == 200 and resp.content_type == "video/iso.segment"
            segment = await resp.read()
        body = b""
        for seq in parts_of(held, f"cam/segment/{done[-1]}.m4s"):
            async with session.get(f"{demo_url}{LIVE}/{seq}.m4s") as resp:
                body += await resp.read()
        assert segment == body
        for query in ("_HLS_part=0", f"_HLS_msn={wanted + 9}", "_HLS_msn=x", "after=-1"):
            async with session.get(f"{demo_url}{LIVE}.m3u8?{query}") as resp:
                assert resp.status == 400, query
        async with session.get(f"{demo_url}{LIVE}/999999.m4s") as resp:
            assert resp.status == 404
        async with session.get(f"{demo_url}{LIVE}/x.m4s") as resp:
            assert resp.status == 400
        async with session.get(f"{demo_url}/live/demo/nothere.m3u8") as resp:
            assert resp.status == 404 and "no live feed" in (await resp.json())["error"]
    out = tmp_path / "watched.mkv"
    proc = await asyncio.create_subprocess_exec(
        ffmpeg, "-v", "error", "-i", f"{demo_url}{LIVE}.m3u8", "-t", str(WATCH_S),
        "-c", "copy", str(out), stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0 and err.decode() == "", err.decode()
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.width, stream.codec_context.height) == (640, 360)
        packets = [p for p in container.demux(stream) if p.size]
    with av.open(str(out)) as container:
        sound = container.streams.audio[0]  # the microphone's, encoded while watched
        assert (sound.codec_context.name, sound.codec_context.sample_rate) == ("aac", 16000)
        heard = sum(frame.samples for frame in container.decode(sound))
    assert heard >= 16000 * (WATCH_S - 1)
    # The demo camera runs at 15 frames/s: ffmpeg read on across parts, live.
    assert len(packets) >= 15 * (WATCH_S - 1)
    assert packets[0].is_keyframe
    assert first >= 0 and re.match(r"^#EXT-X-PROGRAM-DATE-TIME:\d{4}-\d\d-\d\dT", stamps[0])


CAMERA_VIDEO = "[data-widget='cam.video'] video"


async def test_the_wall_plays_the_demo_camera_live_and_says_how_late(
    demo_url: str, page: Page
) -> None:
    async with aiohttp.ClientSession() as session:
        await wait_for_playlist(session, demo_url)  # the flow view lists it live from now
    await page.goto(demo_url + "/?live=hls")  # the LL-HLS player, not WebRTC
    await page.wait_for_selector(f"{CAMERA_VIDEO}[data-live='playing']", timeout=30_000)
    await page.wait_for_function(
        f'() => document.querySelector("{CAMERA_VIDEO}").dataset.latency !== undefined',
        timeout=30_000,
    )
    first = await page.eval_on_selector(CAMERA_VIDEO, "v => v.currentTime")
    await asyncio.sleep(2.0)
    state = await page.eval_on_selector(
        CAMERA_VIDEO,
        """v => ({time: v.currentTime, latency: Number(v.dataset.latency),
                  width: v.videoWidth, frames: v.getVideoPlaybackQuality().totalVideoFrames,
                  error: v.dataset.error || null, src: v.src, codecs: v.dataset.codecs,
                  sound: v.webkitAudioDecodedByteCount, muted: v.muted,
                  shown: (v.mediaflowLatencies || []).length})""",
    )
    # The microphone's sound plays along (muted until the viewer unmutes: autoplay).
    assert state["codecs"].endswith(",mp4a.40.2") and state["sound"] > 0, state
    assert state["muted"] and state["shown"] > 15, state
    assert state["time"] > first + 1.0, state  # it plays on, live
    assert state["width"] == 640 and state["frames"] > 0, state
    assert state["src"].startswith("blob:")  # Media Source Extensions, not a file
    # Capture to screen here: a part (0.5 s), the encoder's delay, a reload, the
    # player's buffer. The benchmark measures it; this only says it is live.
    assert 0.0 < state["latency"] < 5.0, state
    badge = await page.text_content("[data-widget='cam.video'] .live-badge")
    assert badge is not None and badge.startswith("live · ")
    assert page_errors(page) == []


async def test_live_reads_follow_the_read_lock_and_a_link_reads_its_own_flow(
    tmp_path: Path,
) -> None:
    video = encode_video(320, 180, 2 * FPS)
    await check_live_reads(tmp_path, video)


async def check_live_reads(tmp_path: Path, video: EncodedVideo) -> None:
    async with serve(tmp_path, LOCKED) as served:
        hub = served.state.live
        frame = await save(served, b"desk frame")
        await hold(served, "desk", frame)  # the flow the link is for exists
        for flow in ("desk", "yard"):
            tap = hub.open_feed(flow, "cam").tap
            for index, (data, key) in enumerate(zip(video.packets, video.keyframes, strict=True)):
                tap(video.extradata, VideoFrame(data, 1000.0 + index / FPS, key))
        await wait_until(lambda: bool(hub.feed("yard", "cam") and hub.feed("yard", "cam").ready))
        link = as_link((await create(served))["link"])
        for flow, headers, expected in (
            ("desk", {}, 401),
            ("desk", link, 200),
            ("yard", link, 403),  # another flow's camera
            ("yard", BEARER, 200),
        ):
            status, _ = await call(served, "GET", f"/live/{flow}/cam.m3u8", headers=headers)
            assert status == expected, (flow, headers)
        status, body = await call(served, "GET", "/live/desk/cam/init.mp4", headers=link)
        assert status == 200 and body[4:8] == b"ftyp"
        status, body = await call(served, "GET", "/live/desk/cam/0.m4s", headers=link)
        assert status == 200 and body[4:8] == b"moof"


async def test_long_groups_of_pictures_and_short_parts_still_list_a_place_to_start(
    tmp_path: Path,
) -> None:
    # Keyframes 5 s apart (the camera's segment_s), parts of 0.25 s (live_part_s).
    video = encode_video(320, 180, FPS)
    async with serve(tmp_path) as served:
        feed = served.state.live.open_feed("desk", "cam", part_s=0.25, keyframe_s=5.0)
        for index in range(int(10.6 * FPS)):
            data = video.packets[index % FPS]
            feed.tap(
                video.extradata, VideoFrame(data, 1000.0 + index / FPS, index % (5 * FPS) == 0)
            )
        await wait_until(lambda: feed.frames == int(10.6 * FPS))
        status, body = await call(served, "GET", "/live/desk/cam.m3u8")
        # segments 1 and 2 are finished and whole in the window; 3 is in progress
        served_segments = [
            (await call(served, "GET", f"/live/desk/cam/segment/{n}.m4s"))[0] for n in range(4)
        ]
    assert status == 200, body
    assert served_segments == [404, 200, 200, 404]
    text = body.decode()
    durations = [float(d) for d in re.findall(r"#EXT-X-PART:DURATION=([\d.]+),", text)]
    # The keyframe in progress (10 s) begins no finished segment: it starts at the one
    # before (5 s), which it lists whole (a player of segments plays it).
    assert re.findall(r"^cam/segment/(\d+)\.m4s$", text, re.MULTILINE) == ["2"]
    assert "#EXT-X-TARGETDURATION:5\n" in text and "#EXT-X-MEDIA-SEQUENCE:2\n" in text
    assert "#EXT-X-PROGRAM-DATE-TIME:1970-01-01T00:16:45.000Z\n#EXT-X-PART" in text
    assert all(0 < d <= 0.25 + 1 / FPS for d in durations), durations  # whole frames
    assert sum(durations) >= 4.0 and text.count("INDEPENDENT=YES") == 2
