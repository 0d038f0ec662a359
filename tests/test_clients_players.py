"""Players no one here wrote seek in a clip mediaflow recorded and serves: FFmpeg,
GStreamer (``gst-play-1.0``) and VLC.

The clip is recorded as a user records one: a virtual camera and microphone, the
recorder node. Each player is started at 2.5 s into it and must (1) ask the server for a
range starting at the keyframe at 2 s, which it has to decode from (seen on the server's
side: the ``Range`` of every request it answered), and (2) report, in its own words,
pictures from 2.5 s on: FFmpeg's ``showinfo`` timestamps, the timestamps of the buffers
reaching GStreamer's ``fakesink``, VLC's own playback position.
"""

from __future__ import annotations

import re

import pytest

from tests.clients_support import (
    FPS,
    SEEK_CAMERA,
    Recording,
    answers_for,
    assert_seeked_by_range,
    keyframe_before,
    record_now,
    recording_flow,
    run_tool,
    tool,
    vlc_home,
    vlc_reports,
)
from tests.http_support import serve

SEEK_S = 2.5  # between the keyframes at 2 s and 4 s: frames before it are decoded, not shown
FRAME = 1 / FPS


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    made = record_now(recording_flow("seek", SEEK_CAMERA), tmp_path_factory.mktemp("seek"))
    assert len(made.clips) == 1 and made.clips[0].media_type == "video/mp4"
    return made


@pytest.fixture(name="keyframe_pos")
def keyframe_pos_fixture(recording: Recording) -> int:
    time, pos = keyframe_before(recording.clip_bytes[0], SEEK_S)
    assert time == pytest.approx(2.0)
    assert pos > recording.clips[0].size // 3  # far from the start: a seek, not a read-through
    return pos


# pos: the byte offset of the frame's packet, where this FFmpeg prints it (AVFrame.pkt_pos
# is deprecated, so a newer one may not).
_SHOWINFO = re.compile(
    r"\bn:\s*\d+\s+pts:\s*-?\d+\s+pts_time:(-?[0-9.]+)(?:\s.*?\bpos:\s*(-?\d+))?"
)


async def test_ffmpeg_seeks_by_range_and_decodes_from_the_seek_point(
    recording: Recording, keyframe_pos: int
) -> None:
    ffmpeg = tool("ffmpeg")
    clip = recording.clips[0]
    async with serve(recording.data_dir) as served:
        url = f"{served.url}/artifacts/{clip.digest}?type=video/mp4"
        done = await run_tool(
            ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "info",
            "-copyts",  # timestamps as in the clip, not restarted at the seek point
            "-ss", str(SEEK_S), "-i", url,
            "-map", "0:v:0", "-frames:v", "5", "-vf", "showinfo", "-f", "null", "-",
        )  # fmt: skip
        answers = answers_for(list(served.state.answered), clip.digest)
    assert done.returncode == 0, done.stderr[-3000:]
    # The filter may see a frame more than the 5 written.
    frames = [(float(m[1]), m[2]) for m in _SHOWINFO.finditer(done.stderr)][:5]
    assert len(frames) == 5, done.stderr[-3000:]
    times = [time for time, _ in frames]
    assert SEEK_S <= times[0] < SEEK_S + FRAME + 1e-3
    assert times == sorted(times) and times[-1] - times[0] == pytest.approx(4 * FRAME, abs=1e-3)
    assert all(pos is None or int(pos) > keyframe_pos for _, pos in frames)  # past the keyframe
    assert_seeked_by_range(answers, keyframe_pos, clip.size)


_GST_SINK = "GstFakeSink:frames: last-message = "
_GST_SEGMENT_START = re.compile(r"type: segment .*?\bstart=\(guint64\)(\d+)")
_GST_PTS = re.compile(r"= chain .*?pts: (\d+):(\d\d):(\d\d(?:\.\d+)?)")


def frames_after_last_segment(verbose: str) -> tuple[float | None, list[float]]:
    """``(start of the video sink's last segment, pts of the buffers it got after it)``,
    in seconds, from ``gst-play-1.0 -v``. gst-play prerolls the start, and may even play a
    few frames (the sink does not wait for the clock), before its seek flushes the pipeline
    and opens a new segment."""
    start: float | None = None
    pts: list[float] = []
    for line in verbose.splitlines():
        if _GST_SINK not in line:
            continue
        if segment := _GST_SEGMENT_START.search(line):
            start, pts = int(segment[1]) / 1e9, []
        elif chain := _GST_PTS.search(line):
            pts.append(int(chain[1]) * 3600 + int(chain[2]) * 60 + float(chain[3]))
    return start, pts


async def test_gstreamer_seeks_by_range_and_decodes_from_the_seek_point(
    recording: Recording, keyframe_pos: int
) -> None:
    play = tool("gst-play-1.0")
    inspect = tool("gst-inspect-1.0")
    for element, package in [
        ("souphttpsrc", "gstreamer1.0-plugins-good"),
        ("qtdemux", "gstreamer1.0-plugins-good"),
        ("avdec_h264", "gstreamer1.0-libav"),
    ]:
        if (await run_tool(inspect, "--exists", element)).returncode != 0:
            pytest.skip(f"GStreamer element {element} missing (apt-get install {package})")
    clip = recording.clips[0]
    async with serve(recording.data_dir) as served:
        url = f"{served.url}/artifacts/{clip.digest}?type=video/mp4"
        # -v prints each property change, so the video sink's last-message for every
        # buffer it gets; sync=false: as fast as it decodes, not in real time.
        done = await run_tool(
            play, "-v", "--no-interactive", "-s", str(SEEK_S),
            "--videosink", "fakesink name=frames sync=false silent=false",
            "--audiosink", "fakesink sync=false",
            url,
        )  # fmt: skip
        answers = answers_for(list(served.state.answered), clip.digest)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    start, pts = frames_after_last_segment(done.stdout)
    assert start == pytest.approx(SEEK_S) and pts, done.stdout[-3000:]
    # The frame at 2.467 s straddles the seek point: its buffer is clipped to start at 2.5 s.
    assert SEEK_S - 1e-6 <= pts[0] < SEEK_S + FRAME
    assert pts == sorted(pts) and pts[-1] == pytest.approx(4.0 - FRAME, abs=1e-3)
    assert len(pts) >= (4.0 - SEEK_S) * FPS - 1  # every frame from the seek point on
    assert_seeked_by_range(answers, keyframe_pos, clip.size)


async def test_vlc_seeks_by_range_and_plays_from_the_seek_point(
    recording: Recording, keyframe_pos: int
) -> None:
    cvlc = tool("cvlc")
    stop_s = SEEK_S + 1.0
    clip = recording.clips[0]
    async with serve(recording.data_dir) as served:
        url = f"{served.url}/artifacts/{clip.digest}?type=video/mp4"
        with vlc_home() as (prefix, env):
            # VLC's prefetch buffer grows to the whole clip (up to 16 MiB): on loopback all
            # of it can be read before the demuxer seeks, and then no request is needed. A
            # 1 MiB buffer filled 64 KiB at a time stands for a clip longer than the buffer,
            # as a recording of a few minutes is.
            done = await run_tool(
                *prefix, cvlc, "--intf", "luaintf", "--lua-intf", "mfprobe",
                "--vout", "dummy", "--aout", "dummy", "--no-video-title-show",
                "--prefetch-buffer-size=1024", "--prefetch-read-size=65536",
                f"--start-time={SEEK_S}", f"--stop-time={stop_s}", "--play-and-exit", url,
                env=env,
            )  # fmt: skip
        answers = answers_for(list(served.state.answered), clip.digest)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = vlc_reports(done.stdout)
    # VLC's position stays 0 until playback starts, then moves with the clock, which may
    # start a little before the seek point: on the audio frame (64 ms) that holds it.
    playing = [r for r in reports if r.state == 2 and r.time > 0]
    assert playing, done.stdout[-3000:] + done.stderr[-3000:]
    assert all(SEEK_S - FRAME <= r.time <= stop_s + 0.1 for r in playing), playing
    assert max(r.decoded for r in reports) > 0 and max(r.displayed for r in reports) > 0
    assert_seeked_by_range(answers, keyframe_pos, clip.size)
