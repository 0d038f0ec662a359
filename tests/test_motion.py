"""The motion node in real flows: a lavfi camera whose scene has a box that appears and
moves, through the camera connector (as fast as it decodes), into ``use = "motion"``."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import av
import pytest

from mediaflow import FlowBuilder
from mediaflow.nodes.motion import MotionNode
from mediaflow.timeline import TimelineEvent
from tests.connector_helpers import FlowResult, MediaSink, run_flow
from tests.event_helpers import ValueSink, noted_events, run_artifacts

FRAME = 0.1  # the scenes' 10 fps
NEAR = 3 * FRAME  # "within a few frames"
LEFT = [[0, 0], [0.5, 0], [0.5, 1], [0, 1]]
RIGHT = [[0.5, 0], [1, 0], [1, 1], [0.5, 1]]
BAND = [[0, 0.3], [1, 0.3], [1, 0.7], [0, 0.7]]  # every row the box passes through


def scene(enable: str, duration: float) -> str:
    """Gray, and a white 60x60 box at rows 90-150 of 240 sweeping left to right at
    130 px/s (x = 0 at t = 2 and 7) while ``enable`` holds."""
    return (
        "lavfi:color=c=gray:size=320x240:rate=10[bg];color=c=white:size=60x60:rate=10[box];"
        f"[bg][box]overlay=x='mod(t-2,5)*130':y=90:enable='{enable}',trim=duration={duration}"
    )


TWICE = scene("between(t,2,4)+between(t,7,9)", 12)
NOISE = "lavfi:color=c=gray:size=320x240:rate=10,noise=alls=20:allf=t,trim=duration=6"


async def watch(tmp_path: Path, device: str, **options: Any) -> tuple[FlowResult, list[Any]]:
    """Run camera -> motion until idle; the frames (``sink``) and the event port's values."""
    flow = (
        FlowBuilder("watch")
        .add("cam", "camera", device=device, fps=10, realtime=False)
        .add("motion", "motion", inputs={"image": "cam.image"}, **options)
        .add("sink", MediaSink, inputs={"image": "cam.image"})
        .add("events", ValueSink, inputs={"event": "motion.event"})
    )
    result = await run_flow(flow, tmp_path, timeout=60)
    return result, ValueSink.take("events", "event")


def first_frame_at(result: FlowResult) -> float:
    frames = result.port("image")
    assert [f.ref.meta["seq"] for f in frames] == list(range(len(frames)))
    return float(frames[0].ref.meta["captured_at"])


def spans(events: list[dict[str, Any]], t0: float) -> list[tuple[str, Any, float, float | None]]:
    """``(phase, zone, start, end)`` of each event, in seconds since the first frame."""
    return [
        (e["phase"], e["zone"], e["start"] - t0, None if e["end"] is None else e["end"] - t0)
        for e in events
    ]


async def test_a_box_that_appears_twice_gives_two_events(tmp_path: Path) -> None:
    result, events = await watch(tmp_path, TWICE)
    t0 = first_frame_at(result)
    assert [(e["type"], e["phase"], e["source"]) for e in events] == [
        ("motion", "start", "cam"),
        ("motion", "end", "cam"),
    ] * 2
    for (_, zone, start, end), (want_start, want_end) in zip(
        spans(events, t0)[1::2], [(2.0, 4.0), (7.0, 9.0)], strict=True
    ):
        assert zone is None
        assert start == pytest.approx(want_start, abs=NEAR)
        assert end == pytest.approx(want_end, abs=NEAR)
    for start, end in zip(events[::2], events[1::2], strict=True):
        assert start["start"] == end["start"] and start["snapshot"] is None
        assert 0.04 < end["score"] < 0.1  # a 60x60 box is 4.7 % of 320x240
    # The snapshot: the camera's own JPEG of a frame inside the event, kept as a recording.
    # (The box is at x = 0 at 2 s and at 7 s: those frames have the same bytes, one digest.)
    frames = {f.ref.meta["seq"]: f for f in result.port("image")}
    kept = run_artifacts(tmp_path)
    for end in events[1::2]:
        frame = frames[end["snapshot"]["meta"]["seq"]]
        assert frame.ref.to_json() == end["snapshot"]
        assert end["start"] <= frame.ref.meta["captured_at"] <= end["end"]
        assert kept[frame.ref.digest] == "recording"
        with av.open(io.BytesIO(frame.data), "r") as container:
            (picture,) = list(container.decode(video=0))
        assert (picture.width, picture.height) == (320, 240)
        assert picture.to_ndarray(format="gray").max() > 200  # the box is in it
    assert "hold" not in kept.values()  # every frame held as a best-so-far was let go
    noted = noted_events(tmp_path, "watch")
    assert [(n.node, n.event) for n in noted] == [
        ("motion", TimelineEvent.from_json(end)) for end in events[1::2]
    ]
    published = [e.data for e in result.of_type("motion")]
    assert [(p["phase"], p["start"], p["end"]) for p in published] == [
        (e["phase"], e["start"], e["end"]) for e in events
    ]


async def test_a_mask_over_the_box_leaves_no_event(tmp_path: Path) -> None:
    result, events = await watch(tmp_path, TWICE, masks=[BAND])
    assert len(result.port("image")) == 120
    assert events == [] and noted_events(tmp_path, "watch") == []


async def test_noise_is_no_motion(tmp_path: Path) -> None:
    result, events = await watch(tmp_path, NOISE)
    assert len(result.port("image")) == 60
    assert events == [] and noted_events(tmp_path, "watch") == []


async def test_zones_name_their_events(tmp_path: Path) -> None:
    """The box crosses from the left half (from 2 s) into the right one (until 4 s)."""
    result, events = await watch(
        tmp_path, scene("between(t,2,4)", 7), zones={"left": LEFT, "right": RIGHT}
    )
    t0 = first_frame_at(result)
    ended = {zone: (start, end) for _, zone, start, end in spans(events, t0) if end}
    assert sorted(ended) == ["left", "right"] and len(events) == 4
    assert ended["left"][0] == pytest.approx(2.0, abs=NEAR)
    assert ended["right"][1] == pytest.approx(4.0, abs=NEAR)
    # The box is 60 px wide: it reaches x = 160 after (160 - 60) / 130 s, leaves it after
    # 160 / 130 s.
    assert ended["right"][0] == pytest.approx(2.0 + 100 / 130, abs=NEAR)
    assert ended["left"][1] == pytest.approx(2.0 + 160 / 130, abs=NEAR)
    assert sorted(n.event.zone or "" for n in noted_events(tmp_path, "watch")) == [
        "left",
        "right",
    ]


async def test_an_event_in_progress_at_the_end_is_noted_as_ended_at_its_last_motion(
    tmp_path: Path,
) -> None:
    """The camera's scene ends while the box moves: the port has the start only (the flow
    stops), the index the whole event, its snapshot kept."""
    result, events = await watch(tmp_path, scene("between(t,2,4)", 3.5))
    t0 = first_frame_at(result)
    assert [e["phase"] for e in events] == ["start"]
    (noted,) = noted_events(tmp_path, "watch")
    assert noted.event.start == events[0]["start"]
    assert noted.event.end is not None and noted.event.end - t0 == pytest.approx(3.4, abs=1e-6)
    assert noted.event.snapshot is not None
    assert run_artifacts(tmp_path)[noted.event.snapshot.digest] == "recording"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threshold": 300}, "threshold"),
        ({"min_area": 0}, "min_area"),
        ({"min_length_s": -1}, "min_length_s"),
        ({"cooldown_s": 0}, "cooldown_s"),
        ({"background_s": 0}, "background_s"),
        ({"zones": {}}, "at least one zone"),
        ({"zones": {"door": [[0, 0], [1, 1]]}}, "zone 'door'"),
        ({"masks": [[[0, 0], [2, 0], [1, 1]]]}, "mask 0"),
    ],
)
def test_options_out_of_range_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MotionNode(**options)
