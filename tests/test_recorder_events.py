"""``keep = "events"``: the recorder keeps what events cover, with pre-roll from
segments already captured, and lets go of the rest once no event can want it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from mediaflow import Context, FlowBuilder, FlowSession, MediaRef, Node
from mediaflow.config import ConfigError
from mediaflow.nodes.recorder_retain import EventWindows, Verdict
from mediaflow.timeline import TimelineEvent
from tests.connector_helpers import FAST, MediaSink, run_flow

PRE_S, POST_S, LAG_S = 2.0, 1.0, 2.0
EVENT_AT, EVENT_S = 5.0, 2.0  # seconds after the first frame


def test_a_window_keeps_what_it_covers_and_drops_only_what_no_later_event_can_want() -> None:
    windows = EventWindows(pre_s=PRE_S, post_s=POST_S, lag_s=LAG_S)
    assert windows.decide(0, 1, newest=2) is Verdict.WAIT  # an event may still come
    assert windows.decide(0, 1, newest=5.01) is Verdict.DROP  # past pre_s + lag_s
    windows.note(("motion", "cam", None), 10.0, None)  # started: open-ended
    assert windows.decide(8.5, 9.5, newest=30) is Verdict.KEEP  # pre-roll
    assert windows.decide(25, 26, newest=30) is Verdict.KEEP  # still going
    assert not windows.all_end_by(100)
    windows.note(("motion", "cam", None), 10.0, 12.0)  # ended: the start's window closes
    assert windows.all_end_by(13) and not windows.all_end_by(12.9)
    assert windows.decide(12.5, 13.5, newest=30) is Verdict.KEEP  # post-roll
    assert windows.decide(13.5, 14.5, newest=30) is Verdict.DROP
    windows.forget_before(13.5)
    assert windows.windows == {}


class ScriptedEvent(Node):
    """Says an event started ``EVENT_AT`` s after the camera's first frame and ended
    ``EVENT_S`` later, as a motion node would: on the frame that shows it."""

    inputs: ClassVar[Mapping[str, str]] = {"image": "image"}
    outputs: ClassVar[Mapping[str, str]] = {"event": "json"}

    def __init__(self) -> None:
        self.first: float | None = None
        self.event: TimelineEvent | None = None

    async def run(self, ctx: Context) -> None:
        ref = ctx.inputs["image"]
        assert isinstance(ref, MediaRef)
        at = float(ref.meta["captured_at"])
        self.first = at if self.first is None else self.first
        if self.event is None and at >= self.first + EVENT_AT:
            self.event = TimelineEvent("scripted", "cam", at)
            await ctx.emit("event", self.event.to_json())
        elif self.event and self.event.end is None and at >= self.event.start + EVENT_S:
            self.event = self.event.ended(at)
            await ctx.emit("event", self.event.to_json())


@pytest.mark.timeout(60)
async def test_event_clips_hold_the_pre_roll_and_nothing_else(tmp_path: Path) -> None:
    flow = (
        FlowBuilder("retain")
        .add(
            "cam",
            "camera",
            device="lavfi:testsrc2=size=160x120:rate=10,trim=duration=12",
            fps=10,
            segment_s=1.0,
            video=True,
            realtime=True,
        )
        .add("events", ScriptedEvent, inputs={"image": "cam.image"})
        .add(
            "rec",
            "recorder",
            inputs={"video": "cam.video", "event": "events.event"},
            clip_s=10,
            keep="events",
            pre_s=PRE_S,
            post_s=POST_S,
            lag_s=LAG_S,
        )
        .add("sink", MediaSink, inputs={"video": "rec.video"})
    )
    result = await run_flow(flow, tmp_path, timeout=45)
    clips = result.port("video")
    assert len(clips) == 1, [c.ref.meta for c in clips]
    meta = clips[0].ref.meta
    latest = result.latest("events", "event")
    assert isinstance(latest, dict)
    scripted = TimelineEvent.from_json(latest)
    assert scripted.end is not None
    # From the keyframe (a segment's start) at or before start - pre_s, to end + post_s.
    assert meta["keep"] == "events"
    assert scripted.start - PRE_S - 1.0 <= meta["start"] <= scripted.start - PRE_S + 0.05
    assert scripted.end + POST_S - 0.05 <= meta["end"] <= scripted.end + POST_S + 1.0
    assert meta["segments"] <= EVENT_S + PRE_S + POST_S + 2  # not the whole recording


async def test_keeping_events_with_no_event_wired_is_refused_naming_the_node(
    tmp_path: Path,
) -> None:
    flow = (
        FlowBuilder("noevents")
        .add("cam", "camera", device="lavfi:testsrc2=size=160x120:rate=10", video=True)
        .add("rec", "recorder", inputs={"video": "cam.video"}, keep="events")
    )
    session = FlowSession(flow.build(), tmp_path, settings=FAST)
    with pytest.raises(ConfigError, match="recorder 'rec': keep = 'events' needs its input"):
        await session.start()  # a start that fails closes what it opened
