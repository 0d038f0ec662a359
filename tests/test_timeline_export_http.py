"""``GET /api/recordings/{flow}/{node}/export.mp4`` on a real server: one MP4 of the
range, answered like an artifact (ranges, its digest as ETag), exported once for the
same range, its gaps in a header; refusals; and Chromium and VLC playing it from the
asked start."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from multidict import CIMultiDict

from mediaflow.store import ArtifactStore
from mediaflow.timeline import RecordedClip, TimelineIndex
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.clients_support import run_tool, tool, vlc_home, vlc_reports
from tests.http_support import Served, serve
from tests.test_timeline_export import READ_NUMBER
from tests.timeline_support import (  # noqa: F401 - fixtures
    FLOW,
    FRAME,
    NODE,
    ORIGIN,
    Recording,
    number_at,
    recording_fixture,
)

if TYPE_CHECKING:
    from playwright.async_api import Page


def export_path(start: float, end: float, node: str = NODE) -> str:
    return f"/api/recordings/{FLOW}/{node}/export.mp4?start={ORIGIN + start}&end={ORIGIN + end}"


async def fetch(served: Served, path: str, **kwargs: Any) -> tuple[int, CIMultiDict[str], bytes]:
    async with served.client.get(served.url + path, **kwargs) as response:
        return response.status, CIMultiDict(response.headers), await response.read()


async def test_an_export_is_answered_like_an_artifact_and_made_once(
    recording: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "mediaflow.http")
    async with serve(recording.data_dir) as served:
        status, headers, body = await fetch(served, export_path(4.5, 16.3))
        assert status == 200 and headers["Content-Type"] == "video/mp4"
        assert headers["Accept-Ranges"] == "bytes" and headers["ETag"].startswith('"sha256:')
        assert float(headers["X-Mediaflow-Begins-At"]) == pytest.approx(ORIGIN + 4.5, abs=FRAME)
        assert json.loads(headers["X-Mediaflow-Gaps"]) == []
        assert 'filename="rec-rec-' in headers["Content-Disposition"]
        digest = headers["ETag"].strip('"')
        assert ArtifactStore(recording.data_dir).path_for(digest).read_bytes() == body
        # A player's range requests read the same bytes, not another export.
        asks = [fetch(served, export_path(4.5, 16.3), headers={"Range": "bytes=100-199"})] * 3
        for status, headers, part in await asyncio.gather(*asks):
            assert status == 206 and part == body[100:200]
            assert headers["ETag"] == f'"{digest}"'
            assert headers["Content-Range"] == f"bytes 100-199/{len(body)}"
        exported = list((recording.data_dir / "tmp" / "exports").iterdir())
        assert exported == []  # the scratch file went into the store
    made = [r.getMessage() for r in caplog.records if r.getMessage().startswith("exported")]
    assert len(made) == 1 and made[0].startswith("exported rec/rec 2027-01-15T08:00:04.500Z")


async def test_a_hole_in_the_recording_is_named_in_a_header(
    recording: Recording, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    index = TimelineIndex.in_data_dir(data)
    store = ArtifactStore(data)
    try:
        for clip in recording.clips:
            if round(clip.start - ORIGIN) == 12:
                continue  # the camera was away
            path = ArtifactStore(recording.data_dir).path_for(clip.ref.digest)
            ref = store.save_sync(path, clip.ref.media_type, clip.ref.meta)
            index.note_clip(RecordedClip(FLOW, NODE, clip.start, clip.end, ref, clip.sources))
    finally:
        index.close()
        store.close()
    async with serve(data) as served:
        status, headers, _ = await fetch(served, export_path(10, 20))
    assert status == 200
    assert json.loads(headers["X-Mediaflow-Gaps"]) == [
        pytest.approx([ORIGIN + 12, ORIGIN + 18], abs=0.1)
    ]


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        (export_path(20, 10), 400, "must come before end"),
        (f"/api/recordings/{FLOW}/{NODE}/export.mp4?start=1800000000", 400, "both start and end"),
        (f"/api/recordings/{FLOW}/{NODE}/export.mp4?start=x&end=1", 400, "not ISO 8601"),
        (export_path(-1000, -900), 404, "recorded nothing"),
        (export_path(4, 8, node="nope"), 404, "recorded nothing"),
    ],
)
async def test_what_cannot_be_exported_is_refused_naming_why(
    recording: Recording, path: str, status: int, says: str
) -> None:
    async with serve(recording.data_dir) as served:
        got, _, body = await fetch(served, path)
    assert got == status and says in json.loads(body)["error"]


async def test_chromium_plays_the_export_from_the_asked_start(
    recording: Recording, page: Page
) -> None:
    start, end = 7.3, 19.7
    async with serve(recording.data_dir) as served:
        await page.goto(f"{served.url}/healthz")
        seen = await page.evaluate(READ_NUMBER, [served.url + export_path(start, end), 6.0])
        assert 206 in served.statuses("/api/recordings/")
    assert seen["duration"] == pytest.approx(end - start, abs=FRAME)
    assert seen["first"] == pytest.approx(number_at(start), abs=1)
    assert seen["there"] == pytest.approx(number_at(start + 6.0), abs=1)
    assert not page_errors(page)


async def test_vlc_plays_the_export_over_http_from_its_start(recording: Recording) -> None:
    cvlc = tool("cvlc")
    async with serve(recording.data_dir) as served:
        url = served.url + export_path(7.3, 12.3)
        with vlc_home() as (prefix, env):
            done = await run_tool(
                *prefix, cvlc, "--intf", "luaintf", "--lua-intf", "mfprobe",
                "--vout", "dummy", "--aout", "dummy", "--no-video-title-show",
                "--play-and-exit", url, env=env,
            )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reports = vlc_reports(done.stdout)
    playing = [r for r in reports if r.state == 2 and r.time > 0]
    assert playing, done.stdout[-3000:] + done.stderr[-3000:]
    assert max(r.time for r in playing) == pytest.approx(5.0, abs=0.5)  # to the end, not past
    assert max(r.decoded for r in reports) > 0 and max(r.displayed for r in reports) > 0
