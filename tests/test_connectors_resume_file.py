"""A crashed run of a file source, resumed: it continues where it stopped, no replay."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from connectors import FileConnector, MicrophoneConnector
from connectors._timeline import Epoch, Resume, Timeline
from mediaflow import MediaRef
from tests.connector_helpers import make_video, wav_pcm, write_tone
from tests.test_connectors_reconnect import ResumedContext, ref


def test_a_seeked_timeline_continues_at_pts_end_without_a_gap() -> None:
    resume = Resume({"audio": 10}, 30.0, {"audio": 1.0})
    timeline = Timeline(resume, clock=iter([100.0]).__next__, seeked_at=1.0)
    assert timeline.begin() == Epoch(0, 0.0, None)  # the input's own pts start at 1.0
    assert timeline.end == 1.0
    live = Timeline(resume, clock=iter([100.0]).__next__)
    assert live.begin() == Epoch(0, 31.0, 30.0)  # a device: 30 s went by unrecorded


class SavingContext(ResumedContext):
    """Keeps the bytes of what is emitted, in order."""

    def __init__(self, latest: Mapping[str, MediaRef], tmp_path: Path) -> None:
        super().__init__(latest, tmp_path)
        self.saved: list[bytes] = []

    async def save_artifact(
        self, data: bytes | Path | AsyncIterator[bytes], media_type: str,
        meta: Mapping[str, Any] | None = None,
    ) -> MediaRef:  # fmt: skip
        assert isinstance(data, bytes)
        self.saved.append(data)
        return await super().save_artifact(data, media_type, meta)


async def run_source(
    node: MicrophoneConnector | FileConnector, latest: dict[str, MediaRef], tmp_path: Path
) -> SavingContext:
    """Run ``node`` to the end of its file; resumed after a crash when ``latest``."""
    ctx = SavingContext(latest, tmp_path)
    ctx.redelivery = bool(latest)
    await node.setup(ctx)  # type: ignore[arg-type]
    await node.run(ctx)  # type: ignore[arg-type]
    return ctx


async def test_a_resumed_file_microphone_continues_at_pts_end(tmp_path: Path) -> None:
    tone = write_tone(tmp_path / "tone.wav", seconds=2.0, hz=330, rate=16000, channels=1)
    ramp = (np.arange(32000) % 3000).astype("<i2")  # every sample distinct nearby
    tone.write_bytes(tone.read_bytes()[:44] + ramp.tobytes())

    def mic() -> MicrophoneConnector:
        return MicrophoneConnector(device=f"file:{tone}", realtime=False)

    fresh = await run_source(mic(), {}, tmp_path)
    fresh_metas = [v.meta for _, v in fresh.emitted]
    assert [m["seq"] for m in fresh_metas] == list(range(20))  # unchanged when not resumed
    assert wav_pcm(fresh.saved[0])[2][:, 0].tolist() == ramp[:1600].tolist()
    latest = {"audio": ref(9, 0.9, time.time() - 60, 0.1)}  # crashed after 1.0 s
    resumed = await run_source(mic(), latest, tmp_path)
    metas = [v.meta for _, v in resumed.emitted]
    assert [m["seq"] for m in metas] == list(range(10, 20))
    assert [m["pts"] for m in metas] == [m["pts"] for m in fresh_metas[10:]]
    assert metas[0]["pts"] == 1.0 and not any("discontinuity" in m for m in metas)
    # Sample for sample what the fresh run emitted from 1.0 s on.
    for got, want in zip(resumed.saved, fresh.saved[10:], strict=True):
        assert np.array_equal(wav_pcm(got)[2], wav_pcm(want)[2])


def test_a_file_resumes_at_the_earliest_end_of_the_ports_it_feeds() -> None:
    resume = Resume({"image": 30, "video": 1}, 60.0, {"image": 29 / 30, "video": 0.5})
    assert resume.resume_at(["image", "video"]) == 0.5  # the lagging segment decides
    assert resume.resume_at(["image"]) == 29 / 30
    assert resume.resume_at(["image", "audio"]) == 0.0  # audio emitted nothing yet
    assert resume.resume_at([]) == 0.0


async def test_a_resumed_file_video_continues_where_its_segments_stopped(tmp_path: Path) -> None:
    """Images ran ahead of the segment being filled when the run crashed: the file
    continues where the segments stopped, so no frame is missing from ``video``; the
    images after that point are emitted again (seq goes on). Decoded and encoded
    (``copy = false``): segments of copied packets start at keyframes instead."""
    movie = make_video(tmp_path / "movie.mp4", seconds=2.0, fps=30, size=(160, 120))

    def source() -> FileConnector:
        return FileConnector(path=str(movie), realtime=False, fps=30, segment_s=0.5, copy=False)

    fresh = (await run_source(source(), {}, tmp_path)).emitted
    fresh_images = [v.meta for port, v in fresh if port == "image"]
    assert [m["seq"] for m in fresh_images] == list(range(60))
    crashed = time.time() - 60
    latest = {"image": ref(29, 29 / 30, crashed), "video": ref(0, 0.0, crashed, 0.5)}
    resumed = (await run_source(source(), latest, tmp_path)).emitted
    images = [v.meta for port, v in resumed if port == "image"]
    segments = [v.meta for port, v in resumed if port == "video"]
    assert [m["seq"] for m in images] == list(range(30, 30 + 45))  # frames 15-59 again
    assert [m["pts"] for m in images] == [m["pts"] for m in fresh_images[15:]]
    assert abs(segments[0]["pts"] - 0.5) < 1e-6 and segments[0]["seq"] == 1
    covered = sum(m["duration"] for m in segments)
    assert abs(segments[0]["pts"] + covered - 2.0) < 1e-6  # 0.5 s to the end, no hole
    assert not any("discontinuity" in m for m in images + segments)
