"""``/api/recordings`` and ``/api/flows/{flow}/events`` against a real server: spans,
gaps (an evicted clip is one), the events of what a recorder records, refusals, and
what a wall link of the flow may read of its timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mediaflow.server import ServerSettings
from mediaflow.timeline import RecordedClip, TimelineEvent
from tests.http_support import Served, serve
from tests.links_support import BEARER, LOCKED, as_link, call, create, hold, save

T0 = 1_796_565_720.0  # 2026-12-06T14:02:00Z


async def record(served: Served, flow: str = "desk", clips: int = 4) -> list[RecordedClip]:
    """``clips`` kept clips of recorder ``rec`` from 10 s each from T0, and two events."""
    noted = []
    for n in range(clips):
        ref = await served.state.store.save(b"clip %d" % n, "video/mp4", {"seq": n})
        clip = RecordedClip(flow, "rec", T0 + 10 * n, T0 + 10 * (n + 1), ref, ("cam", "mic"))
        served.state.timeline.note_clip(clip)
        noted.append(clip)
    snapshot = await served.state.store.save(b"jpeg", "image/jpeg")
    motion = TimelineEvent("motion", "cam", T0 + 12, T0 + 15, 0.4, snapshot, zone="door")
    served.state.timeline.note_event(flow, "motion", motion)
    served.state.timeline.note_event(flow, "far", TimelineEvent("motion", "cam2", T0 + 12))
    return noted


async def get(served: Served, path: str, **kwargs: Any) -> tuple[int, Any]:
    async with served.client.get(served.url + path, **kwargs) as response:
        return response.status, await response.json()


async def test_a_recorder_timeline_lists_spans_gaps_and_its_events(tmp_path: Path) -> None:
    async with serve(tmp_path, ServerSettings()) as served:
        clips = await record(served)
        served.state.store.delete(clips[2].ref.digest)  # the disk cap took it
        status, body = await get(
            served, "/api/recordings/desk/rec?start=2026-12-06T14:01:50Z&end=1796565780"
        )
        assert status == 200, body
        assert [(s["start"], s["end"]) for s in body["spans"]] == [
            (T0, T0 + 20),
            (T0 + 30, T0 + 40),
        ]
        assert [c["digest"] for c in body["spans"][0]["clips"]] == [
            clips[0].ref.digest,
            clips[1].ref.digest,
        ]
        assert [(g["start"], g["end"], g["reason"]) for g in body["gaps"]] == [
            (T0 - 10, T0, "not recorded"),
            (T0 + 20, T0 + 30, "evicted"),
            (T0 + 40, T0 + 60, "not recorded"),
        ]
        assert body["start_iso"] == "2026-12-06T14:01:50.000Z" and body["recorded_s"] == 30
        assert body["sources"] == ["cam", "mic"]
        # The camera's motion, not a camera this recorder does not record.
        assert [(e["type"], e["source"], e["zone"], e["length"]) for e in body["events"]] == [
            ("motion", "cam", "door", 3.0)
        ]
        status, body = await get(served, "/api/recordings/desk")
        assert (status, body) == (200, {"flow": "desk", "recorders": ["rec"]})


async def test_flow_events_filter_by_type_source_and_range(tmp_path: Path) -> None:
    async with serve(tmp_path, ServerSettings()) as served:
        await record(served)
        served.state.timeline.note_event(
            "desk", "loud", TimelineEvent("loudness", "mic", T0 + 30, T0 + 31, -12.0)
        )
        window = "start=1796565700&end=1796565800"
        status, body = await get(served, f"/api/flows/desk/events?{window}")
        assert status == 200 and [e["node"] for e in body["events"]] == ["far", "motion", "loud"]
        status, body = await get(served, f"/api/flows/desk/events?{window}&type=loudness")
        assert [e["score"] for e in body["events"]] == [-12.0]
        status, body = await get(served, f"/api/flows/desk/events?{window}&source=cam2,mic")
        assert [e["source"] for e in body["events"]] == ["cam2", "mic"]
        status, body = await get(served, f"/api/flows/desk/events?{window}&limit=1")
        assert len(body["events"]) == 1 and body["truncated"] is True
        status, body = await get(served, "/api/flows/desk/events?start=1796565740&end=1796565745")
        assert [e["node"] for e in body["events"]] == ["far"]  # started at T0 + 12, still going


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("start=tomorrow", "not ISO 8601"),
        ("start=1796565800&end=1796565700", "must come before end"),
        ("start=0&end=1796565700", "at most"),
        ("end=1e300", "outside 1970"),
        ("limit=0", "limit"),
        ("limit=x", "invalid literal"),
        ("type=Motion!", "type must be"),
        ("source=", "source must be"),
    ],
)
async def test_bad_queries_are_refused_with_400_naming_why(
    tmp_path: Path, query: str, says: str
) -> None:
    async with serve(tmp_path, ServerSettings()) as served:
        status, body = await get(served, f"/api/flows/desk/events?{query}")
        assert status == 400 and says in body["error"]


async def test_an_unknown_recorder_is_404(tmp_path: Path) -> None:
    async with serve(tmp_path, ServerSettings()) as served:
        await record(served)
        status, body = await get(served, "/api/recordings/desk/nope")
        assert status == 404 and "desk/nope" in body["error"]
        status, body = await get(served, "/api/recordings/desk/bad%20name")
        assert status == 400


async def test_a_wall_link_reads_its_flows_timeline_and_nothing_else(tmp_path: Path) -> None:
    async with serve(tmp_path, LOCKED) as served:
        clips = await record(served)
        await record(served, flow="garage")
        await hold(served, "desk", await save(served, b"frame"))
        link = as_link((await create(served, "desk"))["link"])
        status, _ = await get(served, "/api/recordings/desk/rec?start=1796565700", headers=link)
        assert status == 200
        status, _ = await call(served, "GET", f"/artifacts/{clips[0].ref.digest}", headers=link)
        assert status == 200  # a clip on the flow's timeline, recorded before the link
        status, _ = await get(served, "/api/recordings/garage/rec", headers=link)
        assert status == 403
        status, _ = await get(served, "/api/recordings/desk/rec")
        assert status == 401
        status, _ = await get(served, "/api/recordings/desk/rec", headers=BEARER)
        assert status == 200
