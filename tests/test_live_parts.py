"""Cutting a live camera's frames and a microphone's AAC frames into parts, read by FFmpeg.

Real x264 frames (testsrc2, 30 fps, a keyframe each second) stamped with a capture
clock that jitters as a camera's does, and real AAC frames of a tone stamped on the
same clock, go through :class:`~mediaflow.live.parts.PartCutter`; the init segment
plus the parts, concatenated, must decode whole in FFmpeg and PyAV with the times the
clock gave them.
"""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime
from pathlib import Path

import av
import pytest

from mediaflow.live import AudioTrack, VideoTrack, init_segment
from mediaflow.live.fmp4 import AUDIO_TRACK_ID
from mediaflow.live.parts import AudioFrame, LivePart, PartCutter, VideoFrame
from mediaflow.live.playlist import (
    media_playlist,
    part_target,
    program_date_time,
    segments,
    window,
)
from tests.live_helpers import (
    AAC_FRAME,
    AUDIO_RATE,
    FPS,
    GOP,
    EncodedVideo,
    encode_tone,
    encode_video,
    read_fragment,
    run_tool,
    write,
)

ORIGIN = 1_796_000_000.0  # capture clock (epoch seconds) of the first frame
JITTER_S = 0.004
# A camera's frames are not on exact 1/30 s ticks: decode them at their own times.
PASSTHROUGH = ("-fps_mode", "passthrough", "-enc_time_base", "-1", "-f", "null", "-")


@pytest.fixture(scope="module", name="video")
def video_fixture() -> EncodedVideo:
    return encode_video(320, 180, 3 * FPS)


def frame_times(count: int, seed: int = 7) -> list[float]:
    pick = random.Random(seed)
    return [ORIGIN + i / FPS + pick.uniform(-JITTER_S, JITTER_S) for i in range(count)]


def cut(
    video: EncodedVideo, audio: list[bytes] | None = None, audio_start: float = ORIGIN
) -> list[LivePart]:
    cutter = PartCutter(audio_rate=AUDIO_RATE if audio is not None else None)
    for index, data in enumerate(audio or []):
        cutter.add_audio(AudioFrame(data, audio_start + index * AAC_FRAME / AUDIO_RATE))
    parts: list[LivePart] = []
    for data, keyframe, at in zip(
        video.packets, video.keyframes, frame_times(len(video.packets)), strict=True
    ):
        parts += cutter.add_video(VideoFrame(data, at, keyframe))
    return parts + cutter.flush()


def test_parts_last_about_half_a_second_and_every_keyframe_starts_one(
    video: EncodedVideo,
) -> None:
    parts = cut(video)
    assert [p.seq for p in parts] == list(range(len(parts)))
    assert [p.independent for p in parts] == [True, False] * 3
    # each group of pictures is a segment: its number, and the part's place in it
    assert [(p.segment, p.index) for p in parts] == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]
    assert all(abs(p.duration_s - 0.5) < 2 * JITTER_S + 1e-6 for p in parts)
    assert parts[2].captured_at == pytest.approx(ORIGIN + 1.0, abs=JITTER_S)
    for before, after in itertools.pairwise(parts):
        assert after.start_s == pytest.approx(before.start_s + before.duration_s)


def decode(path: Path) -> tuple[list[float], list[tuple[float, int]]]:
    with av.open(str(path)) as container:
        video = [float(f.time) for f in container.decode(video=0)]
    audio: list[tuple[float, int]] = []
    with av.open(str(path)) as container:
        if container.streams.audio:
            audio = [(float(f.time), f.samples) for f in container.decode(audio=0)]
    return video, audio


def test_the_parts_play_whole_with_their_capture_times(video: EncodedVideo, tmp_path: Path) -> None:
    asc, tone = encode_tone(3.0)
    parts = cut(video, tone, audio_start=ORIGIN + 0.25)
    init = init_segment(VideoTrack.from_annexb(video.extradata), AudioTrack(AUDIO_RATE, 1, asc))
    path = write(tmp_path / "live.mp4", init, *(p.data for p in parts))
    assert run_tool("ffmpeg", "-v", "error", "-i", str(path), *PASSTHROUGH).stderr == ""
    video_times, audio = decode(path)
    stamps = frame_times(len(video.packets))
    expected = [t - stamps[0] for t in stamps]  # the first keyframe is the origin
    assert len(video_times) == len(expected)
    assert video_times == pytest.approx(expected, abs=1 / 90000 + 1e-9)
    # The tone began 0.25 s after the first frame on the same clock, and plays on
    # without a hole across the parts.
    assert audio[0][0] == pytest.approx(ORIGIN + 0.25 - stamps[0], abs=1 / AUDIO_RATE)
    ends = [start + samples / AUDIO_RATE for start, samples in audio]
    assert all(abs(b[0] - end) < 1e-3 for b, end in zip(audio[1:], ends[:-1], strict=True))


def test_a_player_can_join_at_any_independent_part(video: EncodedVideo, tmp_path: Path) -> None:
    parts = cut(video)
    init = init_segment(VideoTrack.from_annexb(video.extradata), None)
    joined = [p for p in parts if p.seq >= 2]
    assert joined[0].independent
    path = write(tmp_path / "join.mp4", init, *(p.data for p in joined))
    assert run_tool("ffmpeg", "-v", "error", "-i", str(path), *PASSTHROUGH).stderr == ""
    video_times, _ = decode(path)
    assert len(video_times) == len(video.packets) - GOP
    assert video_times[0] == pytest.approx(1.0, abs=JITTER_S)


def test_frames_before_the_first_keyframe_or_out_of_time_are_dropped(
    video: EncodedVideo,
) -> None:
    cutter = PartCutter()
    assert cutter.add_video(VideoFrame(video.packets[1], ORIGIN - 0.1, False)) == []
    assert cutter.origin_s is None  # nothing to decode from yet
    cutter.add_video(VideoFrame(video.packets[0], ORIGIN, True))
    cutter.add_video(VideoFrame(video.packets[1], ORIGIN, False))  # no time: dropped
    cutter.add_video(VideoFrame(video.packets[1], ORIGIN + 1 / FPS, False))
    (part,) = cutter.flush()
    assert part.independent and part.duration_s == pytest.approx(2 / FPS)


def test_the_window_starts_where_a_player_can_decode(video: EncodedVideo) -> None:
    parts = cut(video)
    assert [p.independent for p in parts] == [True, False] * 3
    # at a finished segment: parts 4 and 5 are the segment in progress
    assert [p.seq for p in window(parts, 2)] == [2, 3, 4, 5]
    assert [p.seq for p in window(parts, 4)] == [2, 3, 4, 5]
    assert [p.seq for p in window(parts, 5)] == [0, 1, 2, 3, 4, 5]  # 1 is no place to start
    assert [p.seq for p in window(parts, 99)] == [0, 1, 2, 3, 4, 5]  # all there is
    assert [p.seq for p in window(parts[4:], 1)] == [4, 5]  # none finished yet
    assert window(parts[1:2], 1) == []


def test_a_live_playlist_lists_finished_segments_and_every_part(video: EncodedVideo) -> None:
    parts = cut(video)[:-1]  # segment 2 is in progress: its second part is not cut yet
    target = part_target(max(p.duration_s for p in parts))
    assert 0.5 <= target <= 0.5 + 2 * JITTER_S + 0.001
    text = media_playlist(
        parts,
        init_uri="cam/init.mp4",
        part_uri=lambda p: f"cam/{p.seq}.m4s",
        segment_uri=lambda number: f"cam/segment/{number}.m4s",
        part_target_s=target,
        target_s=1.0,
    )
    lines = text.splitlines()
    assert lines[3] == f"#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK={3 * target:.3f}"
    assert lines[4] == f"#EXT-X-PART-INF:PART-TARGET={target:.3f}"
    assert "#EXT-X-ENDLIST" not in lines
    listed = [line for line in lines if not line.startswith("#")]
    assert listed == ["cam/segment/1.m4s", "cam/segment/2.m4s"]  # not 3: in progress
    tagged = [line for line in lines if line.startswith("#EXT-X-PART:")]
    assert [line.split('URI="')[1].split('"')[0] for line in tagged] == [
        f"cam/{seq}.m4s" for seq in range(5)
    ]
    assert [line.endswith(",INDEPENDENT=YES") for line in tagged] == [True, False] * 2 + [True]
    # a segment's date and length are its first part's and its parts' together
    first = lines.index("#EXT-X-PROGRAM-DATE-TIME:" + program_date_time(parts[2].captured_at))
    assert lines[first + 1].startswith("#EXT-X-PART:DURATION=") and "cam/2.m4s" in lines[first + 1]
    assert lines[first + 3] == f"#EXTINF:{parts[2].duration_s + parts[3].duration_s:.5f},"


def test_a_part_target_holds_every_part() -> None:
    assert part_target(0.5) == 0.5
    assert part_target(0.5333333) == 0.534
    assert part_target(0.5000001) == 0.501


def test_ffmpeg_plays_the_playlist_from_its_first_part_to_its_end(
    video: EncodedVideo, tmp_path: Path
) -> None:
    asc, tone = encode_tone(3.0)
    parts = cut(video, tone)
    (tmp_path / "init.mp4").write_bytes(
        init_segment(VideoTrack.from_annexb(video.extradata), AudioTrack(AUDIO_RATE, 1, asc))
    )
    shown = window(parts, 4)
    (tmp_path / "segment").mkdir()
    for group in segments(shown):
        data = b"".join(part.data for part in group)
        (tmp_path / "segment" / f"{group[0].segment}.m4s").write_bytes(data)
    text = media_playlist(
        shown,
        init_uri="init.mp4",
        part_uri=lambda p: f"{p.seq}.m4s",
        segment_uri=lambda number: f"segment/{number}.m4s",
        part_target_s=0.51,
        target_s=1.0,
        ended=True,
    )
    assert text.splitlines()[:6] == [
        "#EXTM3U",
        "#EXT-X-VERSION:9",
        "#EXT-X-TARGETDURATION:1",
        "#EXT-X-PART-INF:PART-TARGET=0.510",
        "#EXT-X-MEDIA-SEQUENCE:2",
        '#EXT-X-MAP:URI="init.mp4"',
    ]
    assert text.count("#EXTINF:") == 2 and text.endswith("#EXT-X-ENDLIST\n")
    stamp = datetime.fromtimestamp(shown[0].captured_at, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert f"#EXT-X-PROGRAM-DATE-TIME:{stamp}." in text
    playlist = tmp_path / "live.m3u8"
    playlist.write_text(text)
    out = tmp_path / "copy.mkv"
    done = run_tool("ffmpeg", "-v", "error", "-i", str(playlist), "-c", "copy", str(out))
    assert done.stderr == ""
    with av.open(str(out)) as container:
        frames = sum(1 for _ in container.demux(video=0) if _.size)
    assert frames == len(video.packets) - GOP  # segments 2 and 3: the last two seconds


def test_sound_after_a_hole_starts_a_run_at_its_own_time(video: EncodedVideo) -> None:
    step = AAC_FRAME / AUDIO_RATE
    times = [ORIGIN + i * step for i in range(3)] + [ORIGIN + (i + 5) * step for i in range(3)]
    cutter = PartCutter(audio_rate=AUDIO_RATE)
    for index, at in enumerate(times):
        cutter.add_audio(AudioFrame(bytes([index]), at))
    parts: list[LivePart] = []
    for index, (data, keyframe) in enumerate(zip(video.packets, video.keyframes, strict=True)):
        parts += cutter.add_video(VideoFrame(data, ORIGIN + index / FPS, keyframe))
    sound = [
        (run.base_decode_time, run.samples)
        for part in parts[:2]
        for run in read_fragment(part.data)[1]
        if run.track_id == AUDIO_TRACK_ID
    ]
    # Two frames were left out (a hole in the sound): the three after it are placed
    # where they were captured, in the next part, not back to back with the first three.
    assert sound == [
        (0, [b"\x00", b"\x01", b"\x02"]),
        (5 * AAC_FRAME, [b"\x03", b"\x04", b"\x05"]),
    ]
