"""A real recording for the export tests: a file whose pictures say their frame number
and whose sound beeps every second (:mod:`bench.timeline.media`), copied by the camera
into 6 s clips of 2 s segments by the recorder, laid back to back from ``ORIGIN``. The
frame shown at wall time ``ORIGIN + t`` is number ``ceil(t * FPS)``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.timeline.media import make_source, record, retime
from mediaflow.store import ArtifactStore
from mediaflow.timeline import ClipFile, RecordedClip, TimelineIndex

ORIGIN = 1_800_000_000.0
FPS = 15
FRAME = 1 / FPS
SECONDS = 36
FLOW, NODE = "rec", "rec"


@dataclass(frozen=True)
class Recording:
    data_dir: Path
    clips: list[RecordedClip]

    def files(self) -> list[ClipFile]:
        store = ArtifactStore(self.data_dir)
        return [ClipFile(c, store.path_for(c.ref.digest)) for c in self.clips]


@pytest.fixture(name="recording", scope="module")
def recording_fixture(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    folder = tmp_path_factory.mktemp("timeline")
    source = folder / "numbered.mp4"
    make_source(source, SECONDS, fps=FPS, keyint=FPS)
    record(source, folder / "data", flow=FLOW, segment_s=2, clip_s=6, timeout=120)
    clips = retime(folder / "data", FLOW, NODE, ORIGIN)
    assert [round(c.start - ORIGIN, 3) for c in clips] == [0, 6, 12, 18, 24, 30]
    return Recording(folder / "data", clips)


@pytest.fixture(name="index")
def index_fixture(recording: Recording) -> Iterator[TimelineIndex]:
    opened = TimelineIndex.in_data_dir(recording.data_dir)
    yield opened
    opened.close()


def number_at(t: float) -> int:
    """The number of the first frame at or after ``ORIGIN + t``."""
    return math.ceil(round(t * FPS, 6))
