"""Sources that already send H.264 or H.265, copied: files through the camera path.

A file goes through the same :class:`~devices.PacketInput` and
:class:`~connectors._copy_run.PacketRun` as an IP camera (tests/test_ipcam.py drives
a real RTSP server), as fast as the flow takes it (``realtime = false``), so these
checks are exact and quick.
"""

from __future__ import annotations

import heapq
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import av
import pytest

from connectors import CameraConnector
from connectors._copy_run import PacketRun
from connectors._copy_segments import PacketSegmenter
from connectors._copy_stage import CopyCounts, CopyStage
from connectors._segments import EncodedSegment
from connectors._timeline import Timeline
from devices import EndOfStream, FrameBridge, PacketInput
from devices.video_info import video_info
from mediaflow import FlowBuilder
from mediaflow.nodes.recorder_mux import SegmentFile, mux_clip
from tests.connector_helpers import MediaSink, make_video, run_flow
from tests.copy_helpers import find_run, h264_slices, stream_facts
from tests.rtsp_server import rtsp_media

FPS = 15
T = TypeVar("T")


def copy_flow(name: str, device: str, *, read: tuple[str, ...], clip_s: float | None = None,
              **options: Any) -> FlowBuilder:  # fmt: skip
    builder = FlowBuilder(name).add(
        "cam", "camera", device=device, realtime=False, **{"fps": 1, "segment_s": 2, **options}
    )
    if read:
        builder = builder.add("sink", MediaSink, inputs={port: f"cam.{port}" for port in read})
    if clip_s is not None:
        builder = builder.add("rec", "recorder", clip_s=clip_s, inputs={"video": "cam.video"})
        builder = builder.add("clips", MediaSink, inputs={"video": "rec.video"})
    return builder


def run_of(result: Any) -> PacketRun:
    node = result.session.node("cam")
    assert isinstance(node, CameraConnector) and isinstance(node.video_run, PacketRun)
    return node.video_run


async def test_a_copied_source_keeps_its_packets_cut_at_keyframes_with_its_sound(
    tmp_path: Path,
) -> None:
    media = rtsp_media("h264", fps=FPS, seconds=6.0, gop_s=1.0)
    flow = copy_flow("copyh264", f"file:{media}", read=("image", "video"))
    result = await run_flow(flow, tmp_path, timeout=60)
    segments = result.port("video")
    assert [s.ref.meta["pts"] for s in segments] == pytest.approx([0.0, 2.0, 4.0], abs=1e-4)
    for index, segment in enumerate(segments):
        meta = segment.ref.meta
        assert meta["seq"] == index and meta["copied"] is True
        assert (meta["codec"], meta["audio_codec"], meta["frames"]) == ("h264", "aac", 2 * FPS)
        assert meta["duration"] == pytest.approx(2.0, abs=1e-4)
        facts = stream_facts(segment.data)
        assert facts["video"]["first_keyframe"] and facts["video"]["decoded"] == 2 * FPS
        assert facts["audio"]["codec"] == "aac" and facts["audio"]["start"] == pytest.approx(0)
    # Bit for bit: every coded slice of the file, in order, and nothing else.
    source = h264_slices(media)
    assert [u for s in segments for u in h264_slices(s.data)] == source
    # One JPEG a second, from a keyframe decoded on its own after the first group.
    images = result.port("image")
    assert [i.ref.meta["pts"] for i in images] == pytest.approx([0, 1, 2, 3, 4, 5], abs=1e-4)
    # Read as fast as it goes, the file keeps its spacing on the wall clock.
    first = segments[0].ref.meta["captured_at"]
    assert [s.ref.meta["captured_at"] - first for s in segments] == pytest.approx([0, 2, 4])
    assert [i.ref.meta["captured_at"] - first for i in images] == pytest.approx([0, 1, 2, 3, 4, 5])
    assert all(i.ref.meta["width"] == 320 and i.ref.meta["codec"] == "jpeg" for i in images)
    stats = run_of(result).statistics()
    assert stats["decoded"] == FPS + 5  # not 90: a file's first group through, then keyframes
    assert stats["skipped"] == {"capture": 0, "jpeg": 0, "video": 0}


async def test_clips_of_copied_segments_hold_the_source_slices_and_sound(tmp_path: Path) -> None:
    media = rtsp_media("h264", fps=FPS, seconds=8.0, gop_s=1.0)
    flow = copy_flow("copyclips", f"file:{media}", read=(), clip_s=4)
    result = await run_flow(flow, tmp_path, timeout=60)
    clips = result.port("video", sink="clips")
    assert len(clips) == 2
    source = h264_slices(media)
    position = 0
    for clip in clips:
        slices = h264_slices(clip.data)
        assert find_run(slices, source) == position  # one after the other, from the start
        position += len(slices)
        facts = stream_facts(clip.data)
        assert facts["audio"]["codec"] == "aac" and clip.ref.meta["audio_codec"] == "aac"
        assert facts["video"]["decoded"] == 4 * FPS
        assert facts["audio"]["start"] == pytest.approx(0, abs=0.03)
        assert facts["audio"]["end"] == pytest.approx(4.0, abs=0.05)
    assert position == len(source)


async def test_a_camera_nobody_watches_decodes_nothing(tmp_path: Path) -> None:
    media = rtsp_media("h264", fps=FPS, seconds=4.0, gop_s=1.0)
    result = await run_flow(copy_flow("copyblind", f"file:{media}", read=("video",)), tmp_path)
    stats = run_of(result).statistics()
    assert (stats["images"], stats["decoded"]) == (0, 0)
    assert len(result.port("video")) == 2 and not result.port("image")


async def test_a_group_of_pictures_longer_than_segment_s_is_one_segment(tmp_path: Path) -> None:
    media = rtsp_media("h264", fps=FPS, seconds=9.0, gop_s=3.0)
    flow = copy_flow("copylonggop", f"file:{media}", read=("video",), segment_s=1)
    result = await run_flow(flow, tmp_path)
    metas = [s.ref.meta for s in result.port("video")]
    assert [m["pts"] for m in metas] == pytest.approx([0.0, 3.0, 6.0], abs=1e-4)
    assert [m["frames"] for m in metas] == [3 * FPS] * 3


async def test_h265_is_copied_tagged_hvc1(tmp_path: Path) -> None:
    media = rtsp_media("h265", fps=FPS, seconds=4.0, gop_s=1.0)
    result = await run_flow(
        copy_flow("copyh265", f"file:{media}", read=("video", "image")), tmp_path
    )
    segments = result.port("video")
    assert [s.ref.meta["codec"] for s in segments] == ["h265", "h265"]
    facts = stream_facts(segments[0].data)
    assert (facts["video"]["codec"], facts["video"]["tag"]) == ("hevc", "hvc1")
    assert facts["video"]["decoded"] == 2 * FPS
    assert len(result.port("image")) == 4


def write_mulaw_movie(path: Path, seconds: float) -> Path:
    """H.264 with G.711 mu-law sound at 8 kHz (in QuickTime), as an IP camera sends it."""
    with av.open(str(path), "w", format="mov") as out:
        video = out.add_stream("libx264", rate=FPS)
        video.width, video.height, video.pix_fmt = 160, 120, "yuv420p"
        video.codec_context.gop_size = FPS
        video.options = {"preset": "ultrafast", "bf": "0"}
        sound = out.add_stream("pcm_mulaw", rate=8000, layout="mono")
        pictures = av.open(f"testsrc2=size=160x120:rate={FPS}:duration={seconds}", format="lavfi")
        tone = av.open(f"sine=frequency=440:sample_rate=8000:duration={seconds}", format="lavfi")

        def encoded(stream: Any, source: Any) -> Any:
            for frame in source.decode(source.streams[0]):
                if isinstance(frame, av.VideoFrame):
                    frame.pict_type = 0
                yield from stream.encode(frame)
            yield from stream.encode(None)

        def when(packet: av.Packet) -> Fraction:
            return Fraction(packet.dts or 0) * (packet.time_base or Fraction(1))

        for packet in heapq.merge(encoded(video, pictures), encoded(sound, tone), key=when):
            out.mux(packet)
    return path


async def test_g711_sound_is_encoded_to_aac_once(tmp_path: Path) -> None:
    media = write_mulaw_movie(tmp_path / "mulaw.mov", seconds=4.0)
    result = await run_flow(copy_flow("copymulaw", f"file:{media}", read=("video",)), tmp_path)
    segments = result.port("video")
    assert [s.ref.meta["audio_codec"] for s in segments] == ["aac", "aac"]
    for segment in segments:
        facts = stream_facts(segment.data)
        assert (facts["audio"]["codec"], facts["audio"]["rate"]) == ("aac", 8000)
        assert facts["audio"]["end"] - facts["audio"]["start"] == pytest.approx(2.0, abs=0.15)
        assert facts["audio"]["decoded"] == facts["audio"]["packets"]


async def test_copy_true_refuses_a_source_it_cannot_copy(tmp_path: Path) -> None:
    mjpeg = make_video(tmp_path / "m.avi", seconds=0.5, codec="mjpeg")
    request = CameraConnector(device=f"file:{mjpeg}", copy=True).video_request
    assert request is not None
    with pytest.raises(ValueError, match="sends mjpeg video; copy = true keeps"):
        await request.open_async()


async def test_copy_false_decodes_and_encodes_an_h264_source(tmp_path: Path) -> None:
    media = rtsp_media("h264", fps=FPS, seconds=2.0, gop_s=1.0)
    flow = copy_flow("copyoff", f"file:{media}", read=("video",), copy=False)
    result = await run_flow(flow, tmp_path)
    metas = [s.ref.meta for s in result.port("video")]
    assert metas and not any(m.get("copied") for m in metas)
    source = set(h264_slices(media))
    assert not source & set(h264_slices(result.port("video")[0].data))  # encoded anew


async def test_segments_with_no_room_to_wait_are_left_out_and_capture_goes_on() -> None:
    """A live camera's stage never waits for the emitter: when saving has fallen behind
    by as many segments as the bridge holds, the next ones are counted and left out,
    and the camera is read on (a file replayed losslessly waits instead)."""
    media = rtsp_media("h264", fps=FPS, seconds=4.0, gop_s=1.0)
    container = av.open(str(media))
    info = video_info("test", container, "url", passthrough=False)
    source = PacketInput("test", container, kind="url", info=info, realtime=False)
    waiting: FrameBridge[EncodedSegment] = FrameBridge(1, "fail")  # nobody reads it
    counts = CopyCounts()
    stage = CopyStage(
        timeline=Timeline(),
        templates=source.templates,
        segmenter=PacketSegmenter(1.0),
        segments_out=waiting,
        chooser=None,
        pictures=None,
        counts=counts,
    )
    source.attach(stage)
    async with source:
        with pytest.raises(EndOfStream):
            await source.read()
    assert waiting.statistics().buffered == 1  # the first segment waits
    assert counts.segments_left_out == 3 and counts.frames_left_out == 3 * FPS
    assert counts.packets == source.statistics().produced  # every packet was read


def top_boxes(data: bytes) -> list[tuple[str, int]]:
    found, at = [], 0
    while at + 8 <= len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        found.append((data[at + 4 : at + 8].decode("latin-1"), size))
        at += size if size else len(data)
    return found


@pytest.mark.parametrize("room", ["enough", "too little"])
def test_a_clip_has_its_index_up_front_written_once_or_moved_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, room: str
) -> None:
    """A clip's index goes in room kept for it at the start (one pass over the file);
    when it does not fit, the clip is written again with ``+faststart``."""
    if room == "too little":
        monkeypatch.setattr("mediaflow.nodes.recorder_mux.INDEX_BASE_BYTES", 64)
        monkeypatch.setattr("mediaflow.nodes.recorder_mux.INDEX_BYTES_PER_SAMPLE", 0)
    media = rtsp_media("h264", fps=FPS, seconds=4.0, gop_s=1.0)
    out = tmp_path / "clip.mp4"
    muxed = mux_clip([SegmentFile(media, 0.0, 4.0)], "video/mp4", None, out, copy_sound=True)
    boxes = top_boxes(out.read_bytes())
    kinds = [kind for kind, _ in boxes]
    assert kinds.index("moov") < kinds.index("mdat")
    left_over = sum(size for kind, size in boxes if kind == "free")
    assert (left_over > 1000) == (room == "enough")  # the room the index did not take
    facts = stream_facts(out)
    assert facts["video"]["decoded"] == muxed.frames == 4 * FPS
    assert facts["audio"]["codec"] == "aac"
