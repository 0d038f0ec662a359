"""The recorder node in real flows: a virtual camera and microphone recorded into clips."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import av
import pytest

from mediaflow import FlowBuilder
from mediaflow.media import MediaRef
from mediaflow.timeline import TimelineIndex
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.connector_helpers import MediaSink, run_flow
from tests.http_support import serve

if TYPE_CHECKING:
    from playwright.async_api import Page

CAMERA = "lavfi:testsrc2=size=320x240:rate=15,trim=duration=8"
TONE = "lavfi:sine=frequency=440:sample_rate=16000:duration=9"
FRAME = 1 / 15


def recording_flow(name: str, *, codec: str = "h264", audio: bool = True) -> FlowBuilder:
    flow = FlowBuilder(name).add(
        "cam", "camera", device=CAMERA, fps=5, segment_s=2.0, codec=codec, realtime=False,
        video=True,
    )  # fmt: skip
    inputs = {"video": "cam.video"}
    if audio:
        flow = flow.add("mic", "microphone", device=TONE, realtime=False)
        inputs["audio"] = "mic.audio"
    return flow.add("rec", "recorder", inputs=inputs, clip_s=4).add(
        "sink", MediaSink, inputs={"video": "rec.video"}
    )


def probe(data: bytes) -> dict[str, Any]:
    """Streams, duration and start times of a clip; decodes every frame."""
    with av.open(io.BytesIO(data), "r") as container:
        video, audio = container.streams.video[0], container.streams.audio
        facts: dict[str, Any] = {
            "format": container.format.name,
            "duration": container.duration / 1e6 if container.duration else None,
            "video_codec": video.codec_context.name,
            "audio_codec": audio[0].codec_context.name if audio else None,
        }
    with av.open(io.BytesIO(data), "r") as container:
        frames = list(container.decode(video=0))
    facts["frames"] = len(frames)
    facts["keyframe_first"] = frames[0].key_frame
    facts["video_start"] = frames[0].time
    facts["video_span"] = frames[-1].time - frames[0].time + FRAME
    if facts["audio_codec"]:
        with av.open(io.BytesIO(data), "r") as container:
            samples = list(container.decode(audio=0))
        facts["audio_start"] = samples[0].time
    return facts


@pytest.mark.parametrize(
    ("codec", "fmt", "audio_codec"),
    [("h264", "mov,mp4,m4a,3gp,3g2,mj2", "aac"), ("vp8", "matroska,webm", "opus")],
)
async def test_camera_and_tone_are_recorded_into_clips(
    tmp_path: Path, codec: str, fmt: str, audio_codec: str
) -> None:
    result = await run_flow(recording_flow(f"rec{codec}", codec=codec), tmp_path, timeout=45)
    clips = result.port("video")
    assert len(clips) == 2
    for index, clip in enumerate(clips):
        ref, meta = clip.ref, clip.ref.meta
        assert ref.media_type == ("video/mp4" if codec == "h264" else "video/webm")
        assert meta["seq"] == index and meta["size"] == ref.size == len(clip.data)
        assert (meta["width"], meta["height"], meta["video_codec"]) == (320, 240, codec)
        assert meta["audio_codec"] == audio_codec
        assert meta["end"] - meta["start"] == pytest.approx(4.0, abs=FRAME)
        assert meta["duration"] == pytest.approx(4.0, abs=FRAME)
        facts = probe(clip.data)
        assert facts["format"] == fmt and facts["audio_codec"] in {"aac", "opus", "libopus"}
        assert facts["frames"] == 60 and facts["keyframe_first"]
        assert facts["video_span"] == pytest.approx(4.0, abs=FRAME)
        assert facts["duration"] == pytest.approx(4.0, abs=FRAME)
        assert abs(facts["audio_start"] - facts["video_start"]) <= 0.040
    kept = {row for row in store_kept(result.session)}
    assert {c.ref.digest for c in clips} <= kept
    index = TimelineIndex.in_data_dir(result.session.data_dir)
    try:
        noted = index.clips(f"rec{codec}", "rec", 0.0, float("inf"))
    finally:
        index.close()
    assert [(c.ref, c.start, c.end, c.sources) for c in noted] == [
        (clip.ref, clip.ref.meta["start"], clip.ref.meta["end"], ("cam", "mic")) for clip in clips
    ]


def store_kept(session: Any) -> set[str]:
    import sqlite3

    with sqlite3.connect(session.data_dir / "store.sqlite3") as db:
        return {d for (d,) in db.execute("SELECT digest FROM run_artifact")}


async def test_video_only_clips_have_no_audio_track(tmp_path: Path) -> None:
    result = await run_flow(recording_flow("recvideo", audio=False), tmp_path, timeout=45)
    clips = result.port("video")
    assert [c.ref.meta["audio_codec"] for c in clips] == [None, None]
    for clip in clips:
        assert isinstance(clip.ref, MediaRef)
        assert probe(clip.data)["audio_codec"] is None


async def test_segments_are_held_until_their_clip_is_muxed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder acks each segment as it arrives but reads it at mux time: it
    holds every segment while its clip waits and lets go once the clip is kept."""
    from mediaflow.store import ArtifactStore

    calls: list[tuple[str, str]] = []  # ("hold" | "recording" | "unkeep", digest)
    held_when_kept: list[bool] = []
    real_keep, real_unkeep = ArtifactStore.keep, ArtifactStore.unkeep

    def keep(self: ArtifactStore, run_id: str, digest: str, **options: Any) -> bool:
        added = real_keep(self, run_id, digest, **options)
        kind = options.get("kind", "recording")
        if kind == "recording":  # a clip: every segment waiting is still held
            waiting = {d for c, d in calls if c == "hold"} - {d for c, d in calls if c == "unkeep"}
            held_when_kept.append(bool(waiting) and all(self.is_kept(d) for d in waiting))
        calls.append((kind, digest))
        return added

    def unkeep(self: ArtifactStore, run_id: str, digest: str) -> bool:
        calls.append(("unkeep", digest))
        return real_unkeep(self, run_id, digest)

    monkeypatch.setattr(ArtifactStore, "keep", keep)
    monkeypatch.setattr(ArtifactStore, "unkeep", unkeep)
    result = await run_flow(recording_flow("recholds", audio=False), tmp_path, timeout=45)

    clips = result.port("video")
    assert len(clips) == 2 and held_when_kept == [True, True]
    held = [d for c, d in calls if c == "hold"]
    assert len(held) == len(set(held)) == 4  # 8 s of 2 s segments, each held once
    for clip in clips:
        at = calls.index(("recording", clip.ref.digest))
        segments = clip.ref.meta["segments"]
        let_go = calls[at + 1 : at + 1 + segments]
        assert all(c == "unkeep" for c, _ in let_go)
        assert all(calls.index(("hold", d)) < at for _, d in let_go)
    assert sorted(d for c, d in calls if c == "unkeep") == sorted(held)
    assert store_kept(result.session) == {c.ref.digest for c in clips}


CRASH_FLOW = """\
[flow]
name = "crash"

[[node]]
id = "cam"
connector = "camera"
device = "lavfi:testsrc2=size=320x240:rate=15"
fps = 5
segment_s = 1
video = true

[[node]]
id = "mic"
connector = "microphone"
device = "lavfi:sine=frequency=440:sample_rate=16000"

[[node]]
id = "rec"
use = "recorder"
clip_s = 2
inputs = { video = "cam.video", audio = "mic.audio" }
"""


def test_a_killed_recording_leaves_earlier_clips_playable(tmp_path: Path) -> None:
    import json
    import signal
    import subprocess
    import sys
    import time

    from mediaflow.store import ArtifactStore

    flow = tmp_path / "crash.toml"
    flow.write_text(CRASH_FLOW)
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mediaflow.cli", "run", str(flow), "--jsonl", "--data", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    clips: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    try:
        for line in proc.stdout:
            value = json.loads(line)
            if value["node"] == "rec":
                clips.append(value["value"])
            if len(clips) == 2 or time.monotonic() > deadline:
                break
        time.sleep(1.0)  # mid-way through the third clip
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(clips) == 2
    store = ArtifactStore(data)
    for clip in clips:
        path = store.path_for(clip["digest"])
        assert path.stat().st_size == clip["size"]
        with av.open(str(path)) as container:
            frames = list(container.decode(video=0))
        with av.open(str(path)) as container:
            samples = list(container.decode(audio=0))
        assert len(frames) == 30 and frames[0].key_frame and samples
    leftovers = list((data / "tmp" / "recorder").glob("clip-*/*"))
    assert len(leftovers) <= 1  # at most the clip being written when it died


async def test_chromium_plays_a_clip_and_seeks_to_its_middle(tmp_path: Path, page: Page) -> None:
    result = await run_flow(recording_flow("recbrowser"), tmp_path / "data", timeout=45)
    clip = result.port("video")[0].ref
    async with serve(tmp_path / "data") as served:
        await page.goto(f"{served.url}/healthz")
        state = await page.evaluate(
            """async (src) => {
                const v = document.createElement('video');
                v.muted = true;
                document.body.appendChild(v);
                const once = (name) => new Promise((ok, fail) => {
                    v.addEventListener(name, () => ok(name), {once: true});
                    v.addEventListener('error', () => fail(String(v.error && v.error.message)),
                                       {once: true});
                });
                const loaded = once('loadedmetadata');
                v.src = src;
                await loaded;
                await v.play();
                const seeked = once('seeked');
                v.currentTime = v.duration / 2;
                await seeked;
                return {duration: v.duration, time: v.currentTime,
                        width: v.videoWidth, ready: v.readyState};
            }""",
            f"{served.url}/artifacts/{clip.digest}",
        )
        assert state["duration"] == pytest.approx(4.0, abs=FRAME)
        assert state["time"] == pytest.approx(2.0, abs=0.2)
        assert state["width"] == 320 and state["ready"] >= 2
        assert 206 in served.statuses("/artifacts/")
    assert not page_errors(page)
