"""Unplug and replug, streams that end, and crash-resumes: seq, gaps and events."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import tests.test_devices_video as video_tests
from connectors import CameraConnector, MicrophoneConnector
from connectors._timeline import Epoch, PortSequence, Resume, Timeline, read_resume
from devices import DeviceNotFound, VideoInput
from mediaflow import FlowBuilder, MediaRef
from mediaflow.live.hub import LiveHub
from tests.connector_helpers import (
    FlowResult,
    MediaSink,
    UnpluggedAfter,
    all_of,
    count,
    lavfi_container,
    run_flow,
    sink_has,
    write_tone,
)

# -- a camera unplugged mid-stream, still missing twice, then back ---------------------------


class PacedUnplug(UnpluggedAfter):
    """A real lavfi container delivering at 30 fps, like a camera, then yanked."""

    def demux(self, *args: Any) -> Iterator[Any]:
        for packet in super().demux(*args):
            time.sleep(1 / 30)
            yield packet


def assert_gap_free(result: FlowResult, port: str) -> list[Mapping[str, Any]]:
    metas = [r.ref.meta for r in result.port(port)]
    assert [m["seq"] for m in metas] == list(range(len(metas)))
    assert all(b["pts"] > a["pts"] for a, b in itertools.pairwise(metas))
    return metas


async def test_unplugged_camera_backs_off_reconnects_and_marks_the_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = iter(["frames", "missing", "missing", "frames"])  # then missing for good
    attempts: list[float] = []

    def open_video(spec: str, **kwargs: Any) -> VideoInput:
        attempts.append(time.monotonic())
        if next(plan, "missing") == "missing":
            raise DeviceNotFound(spec, ["/dev/video1 (Other Camera)"])
        container = PacedUnplug(lavfi_container(), 20)
        return VideoInput(spec, container, kind="v4l2", realtime=False)

    monkeypatch.setattr("connectors._video_request.open_video", open_video)
    flow = (
        FlowBuilder("unplug")
        .add(
            "cam",
            "camera",
            device="/dev/video0",
            fps=10,
            segment_s=60.0,
            reconnect_base_s=0.05,
            reconnect_max_s=0.2,
        )
        .add("sink", MediaSink, inputs={"image": "cam.image", "video": "cam.video"})
    )
    # Lost, restored, lost again (and the third open finds nothing, for good).
    until = all_of(count("device_lost", 2), sink_has("video", 2))
    result = await run_flow(flow, tmp_path, until=until)

    lost, restored = result.of_type("device_lost"), result.of_type("device_restored")
    assert len(lost) == 2 and len(restored) == 1
    assert "ENODEV" in lost[0].data["error"] or "No such device" in lost[0].data["error"]
    assert restored[0].data["attempts"] == 3
    assert restored[0].data["waited_s"] == pytest.approx(0.05 + 0.1 + 0.2)
    assert restored[0].data["down_s"] >= 0.35
    # The delays were really slept between the attempts (setup's open is attempts[0]).
    gaps = [b - a for a, b in itertools.pairwise(attempts[1:4])]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2 and sum(gaps) < 2.0, gaps

    images = assert_gap_free(result, "image")
    assert len(images) >= 10  # ~7 per 20-frame stretch at fps=10
    marked = [i for i, meta in enumerate(images) if meta.get("discontinuity")]
    assert len(marked) == 1 and marked[0] > 0
    assert images[marked[0]]["gap_s"] >= 0.35
    assert images[marked[0]]["pts"] - images[marked[0] - 1]["pts"] >= 0.35

    # The segment open at each loss was emitted then; the second one starts the gap.
    segments = assert_gap_free(result, "video")
    assert [s["frames"] for s in segments] == [20, 20]
    assert "discontinuity" not in segments[0] and segments[1]["discontinuity"] is True


# -- a network stream that ends is a lost device too ----------------------------------------


# The devices suite's loopback HTTP server for a one-second clip (and the clip).
clip = video_tests.clip
http_server = video_tests.http_server


async def test_a_stream_that_ends_is_reconnected(tmp_path: Path, http_server: str) -> None:
    flow = (
        FlowBuilder("stream")
        .add("cam", "url", url=http_server, fps=10, reconnect_base_s=0.2, reconnect_max_s=0.2)
        .add("sink", MediaSink, inputs={"image": "cam.image"})
    )
    result = await run_flow(flow, tmp_path / "data", until=count("device_restored", 2))
    lost, restored = result.of_type("device_lost"), result.of_type("device_restored")
    assert len(lost) >= 2 and len(restored) >= 2
    assert all(e.data["attempts"] == 1 and e.data["device"] == http_server for e in restored)
    images = assert_gap_free(result, "image")
    marked = [meta for meta in images if meta.get("discontinuity")]
    assert 1 <= len(marked) <= len(restored)
    assert all(meta["gap_s"] >= 0 and meta["device"] == http_server for meta in marked)


async def test_a_sound_stream_is_chunked_and_reconnected(
    tmp_path: Path, clip: Path, http_server: str
) -> None:
    write_tone(clip.parent / "tone.wav", seconds=0.5, rate=16000, channels=1)
    url = http_server.rsplit("/", 1)[0] + "/tone.wav"
    flow = (
        FlowBuilder("radio")
        .add("radio", "url", url=url, media="audio", reconnect_base_s=0.2, reconnect_max_s=0.2)
        .add("sink", MediaSink, inputs={"audio": "radio.audio"})
    )
    result = await run_flow(
        flow, tmp_path / "data", until=all_of(count("device_restored", 3), sink_has("audio", 15))
    )
    # Three passes over the stream end to end: each end a loss, each reopen a gap.
    chunks = assert_gap_free(result, "audio")
    assert len(chunks) >= 10 and all(c["rate"] == 16000 for c in chunks)
    starts = [i for i, meta in enumerate(chunks) if meta.get("discontinuity")]
    assert starts[:2] == [5, 10]  # 5 chunks of 100 ms per pass over the stream


# -- crash-resume: seq continues from the latest value ---------------------------------------


class ResumedContext:
    """Just enough of the engine's Context for a source resumed after a crash."""

    def __init__(self, latest: Mapping[str, MediaRef], tmp_path: Path) -> None:
        self.node, self.flow = "cam", "resume"
        self.redelivery = True
        self.flow_dir = tmp_path
        self.log = SimpleNamespace(warning=print, info=print)
        self.live = LiveHub()
        self._latest = latest
        self.emitted: list[tuple[str, MediaRef]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.more = self  # the engine's ctx.more, here the same object

    def latest(self, port: str) -> MediaRef | None:
        return self._latest.get(port)

    def has_readers(self, port: str) -> bool:
        return True

    def stopping(self) -> bool:
        return False

    def publish(self, event_type: str, **data: Any) -> None:
        self.events.append((event_type, data))

    async def save_artifact(
        self, data: bytes | Path | AsyncIterator[bytes], media_type: str,
        meta: Mapping[str, Any] | None = None,
    ) -> MediaRef:  # fmt: skip
        assert isinstance(data, bytes)
        return MediaRef("sha256:" + "0" * 64, media_type, len(data), dict(meta or {}))

    async def emit(self, port: str, value: Any) -> None:
        self.emitted.append((port, value))


def ref(seq: int, pts: float, captured_at: float, duration: float | None = None) -> MediaRef:
    meta: dict[str, Any] = {"seq": seq, "pts": pts, "captured_at": captured_at}
    if duration is not None:
        meta["duration"] = duration
    return MediaRef("sha256:" + "1" * 64, "image/jpeg", 1, meta)


async def test_a_resumed_camera_continues_seq_and_marks_the_gap(tmp_path: Path) -> None:
    crashed_at = time.time() - 5.0
    ctx = ResumedContext(
        {"image": ref(41, 20.0, crashed_at), "video": ref(9, 18.0, crashed_at - 2, 2.0)},
        tmp_path,
    )
    camera = CameraConnector(
        device="lavfi:testsrc2=size=160x120:rate=30,trim=duration=1", realtime=False
    )
    await camera.setup(ctx)  # type: ignore[arg-type]
    await camera.run(ctx)  # type: ignore[arg-type]
    images = [v.meta for port, v in ctx.emitted if port == "image"]
    segments = [v.meta for port, v in ctx.emitted if port == "video"]
    assert [m["seq"] for m in images] == list(range(42, 42 + 15))
    assert [m["seq"] for m in segments] == [10]
    for first in (images[0], segments[0]):
        assert first["discontinuity"] is True and first["gap_s"] == pytest.approx(5.0, abs=0.5)
        assert first["pts"] == pytest.approx(25.0, abs=0.5)  # 20 s, then 5 s away
    assert not any("discontinuity" in m for m in images[1:])


async def test_a_resumed_microphone_continues_seq(tmp_path: Path) -> None:
    ctx = ResumedContext({"audio": ref(99, 9.9, time.time() - 1, 0.1)}, tmp_path)
    mic = MicrophoneConnector(
        device="lavfi:sine=frequency=440:sample_rate=16000:duration=0.5", realtime=False
    )
    await mic.setup(ctx)  # type: ignore[arg-type]
    await mic.run(ctx)  # type: ignore[arg-type]
    metas = [v.meta for _, v in ctx.emitted]
    assert [m["seq"] for m in metas] == [100, 101, 102, 103, 104]
    assert metas[0]["discontinuity"] is True and "discontinuity" not in metas[1]


@pytest.mark.parametrize(
    ("redelivery", "latest", "expected"),
    [
        (False, {"image": ref(5, 1.0, 100.0)}, None),  # a fresh run starts at 0
        (True, {}, Resume({}, 0.0)),  # crashed before emitting anything
        (True, {"image": ref(5, 1.0, 100.0)}, Resume({"image": 6}, 10.0, {"image": 1.0})),
        (
            True,
            {"image": ref(5, 1.0, 100.0), "video": ref(2, 0.0, 99.0, 2.0)},
            Resume({"image": 6, "video": 3}, 10.0, {"image": 1.0, "video": 2.0}),
        ),
    ],
)
def test_read_resume(
    redelivery: bool, latest: dict[str, MediaRef], expected: Resume | None, tmp_path: Path
) -> None:
    ctx = ResumedContext(latest, tmp_path)
    ctx.redelivery = redelivery
    assert read_resume(ctx, ["image", "video"], now=110.0) == expected  # type: ignore[arg-type]


def test_timeline_and_sequence_mark_each_gap_once_per_port() -> None:
    clock = iter([100.0, 103.0, 103.5]).__next__
    timeline = Timeline(clock=clock)
    first = timeline.begin()
    timeline.seen(1.9, 0.1)  # emitted up to 2.0
    second = timeline.begin()  # 3 s after the start: a 1 s gap
    timeline.seen(4.9, 0.1)  # a stream catching up got to 5.0 by 3.5 s
    third = timeline.begin()
    assert first == Epoch(0, 0.0, None)
    assert second == Epoch(1, 3.0, 1.0)
    assert third == Epoch(2, 5.0, 0.0)  # never back in time
    assert timeline.split(third, 0.25) == Epoch(3, 5.0, 0.25)
    seq = PortSequence("image", Resume({"image": 7}, 0.0))
    assert seq.stamp(first) == {"seq": 7}
    assert seq.stamp(second) == {"seq": 8, "discontinuity": True, "gap_s": 1.0}
    assert seq.stamp(second) == {"seq": 9}
