"""Every segment the camera writes and every clip the recorder writes, for each codec the
camera offers, is read without a complaint by two parsers no one here wrote: FFprobe
(which decodes every frame here, so a broken packet shows) and MKVToolNix's ``mkvmerge -J``
(its own parsers for MP4 and Matroska/WebM).

A short real flow per codec (a virtual camera with 2 s segments and a tone into the
recorder, 4 s clips) fills a store; every ``video/*`` artifact in it is checked, and
those are exactly the segments and clips the flow emitted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connectors._options import CODECS
from mediaflow.media import MediaRef
from mediaflow.store import ArtifactStore
from tests.clients_support import (
    FPS,
    SEGMENT_S,
    SMALL_CAMERA,
    record,
    recording_flow,
    run_tool,
    tool,
)

CLIP_S = 4.0
# What each container is called by the two tools, by media type.
FORMATS = {
    "video/mp4": ("mov,mp4,m4a,3gp,3g2,mj2", "QuickTime/MP4"),
    "video/webm": ("matroska,webm", "Matroska"),
}
AUDIO_CODECS = {"video/mp4": "aac", "video/webm": "opus"}


@pytest.mark.parametrize("codec", CODECS)
async def test_ffprobe_and_mkvmerge_accept_every_segment_and_clip(
    tmp_path: Path, codec: str
) -> None:
    ffprobe, mkvmerge = tool("ffprobe"), tool("mkvmerge")
    recording = await record(recording_flow(f"probe{codec}", SMALL_CAMERA, codec), tmp_path)
    assert len(recording.segments) == 2 and len(recording.clips) == 1
    with ArtifactStore(recording.data_dir) as store:
        stored = {i.digest: i for i in store.iter_infos() if i.media_type.startswith("video/")}
    emitted: dict[str, tuple[MediaRef, float]] = {
        **{ref.digest: (ref, SEGMENT_S) for ref in recording.segments},
        **{ref.digest: (ref, CLIP_S) for ref in recording.clips},
    }
    assert stored.keys() == emitted.keys()  # nothing written that is not checked below
    for digest, (ref, seconds) in emitted.items():
        path = str(stored[digest].path)
        is_clip = ref in recording.clips
        ffprobe_format, mkvmerge_type = FORMATS[ref.media_type]

        probed = await run_tool(
            ffprobe, "-v", "error", "-count_frames", "-of", "json",
            "-show_entries", "format=format_name:stream=codec_type,codec_name,nb_read_frames",
            path,
        )  # fmt: skip
        assert (probed.returncode, probed.stderr) == (0, ""), (ref, probed.stderr)
        facts = json.loads(probed.stdout)
        assert facts["format"]["format_name"] == ffprobe_format
        streams = {s["codec_type"]: s for s in facts["streams"]}
        assert streams["video"]["codec_name"] == codec
        assert int(streams["video"]["nb_read_frames"]) == round(seconds * FPS), ref
        if is_clip:
            assert streams["audio"]["codec_name"] == AUDIO_CODECS[ref.media_type]
            assert int(streams["audio"]["nb_read_frames"]) > 0
        else:
            assert streams.keys() == {"video"}

        identified = await run_tool(mkvmerge, "-J", path)
        # 0: fine; 1: warnings; 2: errors (mkvmerge(1), "EXIT CODES").
        assert identified.returncode == 0, (ref, identified.stdout, identified.stderr)
        report = json.loads(identified.stdout)
        container = report["container"]
        assert container["recognized"] is True and container["supported"] is True, report
        assert container["type"] == mkvmerge_type
        assert report.get("errors", []) == [] and report.get("warnings", []) == [], report
        kinds = sorted(t["type"] for t in report["tracks"])
        assert kinds == (["audio", "video"] if is_clip else ["video"]), report
