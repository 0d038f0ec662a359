"""``python -m bench.timeline``, briefly: its accuracy reading on made-up frames, and one
tiny real run against ffmpeg's concat demuxer on the same clips.

Whether mediaflow is faster than the peer on a busy machine is the bench's question,
not the test's; that its own exports are frame-exact and in step with the sound is.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest

from bench.timeline.hour import unwrap
from bench.timeline.main import accuracy, main, ranges
from bench.timeline.media import Shown


def test_accuracy_counts_frames_off_the_asked_range_and_the_sound_skew() -> None:
    # Asked 2.5 s to 4.5 s at 10 fps: frames 25 to 44. Shown: from 23 (two early), one
    # repeated, to 44; the beep of second 3 (frame 30, shown at 0.8 s) heard 20 ms late.
    numbers = [23, 24, 25, 26, 26, *range(27, 45)]
    frames = [(k / 10, n) for k, n in enumerate(numbers)]
    seen = Shown(frames, beeps=[0.8 + 0.02], audio_start=0.0)
    found = accuracy(seen, 2.5, 2.0, 10)
    assert found["first_off_frames"] == -2 and found["last_off_frames"] == 0
    assert found["length_off_frames"] == 3 and found["frames_missing_or_repeated"] == 1
    assert found["sound_skew_ms"] == pytest.approx(20.0)


def test_ranges_are_spread_and_off_the_grid() -> None:
    starts = ranges(600, 120, 3)
    assert len(set(starts)) == 3 and all(0 < s < 480 and round(s % 1, 2) == 0.37 for s in starts)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="the ffmpeg binary is the peer")
def test_a_tiny_run_reports_every_tool_and_ours_is_exact(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["--minutes", "0.5", "--range", "8", "--runs", "1", "--size", "160x120",
                 "--clip", "4", "--json"])  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["tools"]) == {"export_clips", "mediaflow export", "ffmpeg concat"}
    for tool in ("export_clips", "mediaflow export"):
        ours = report["tools"][tool]
        assert ours["first_off_frames"] == ours["last_off_frames"] == [0], ours
        assert ours["discontinuities"] == 0 and ours["sound_skew_ms"] <= 40
    assert report["ffmpeg_over_export_clips"]["median"] > 0


def test_unwrap_counts_on_across_the_repeats_and_keeps_a_repeat_or_a_skip() -> None:
    # A 100-frame source shown again and again, read near frame 1,000 of the whole.
    assert unwrap([98, 99, 0, 1], 100, 1_000) == [998, 999, 1_000, 1_001]
    assert unwrap([5, 5, 7], 100, 290) == [305, 305, 307]  # a repeat, then a skip


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="the ffmpeg binary is the peer")
def test_a_tiny_hour_of_repeated_clips_is_exported_exactly_by_ours(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 24 s recorded in 4 s clips, laid back to back to cover 30 s and one more round.
    code = main(["--hour", "--minutes", "0.4", "--range", "30", "--size", "160x96",
                 "--kbps", "200", "--runs", "1", "--clip", "4", "--json"])  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)["hour"]
    assert report["source"]["laid"] > report["source"]["recorded"]
    for tool in ("export_clips", "mediaflow export"):
        ours = report["tools"][tool]
        assert ours["first_off_frames"] == ours["last_off_frames"] == [0], ours
        assert ours["length_off_frames"] == [0] and ours["discontinuities"] == 0, ours
        assert ours["sound_skew_ms"] <= 40, ours
    assert report["ffmpeg_over_export_clips_cpu"]["median"] > 0


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="the ffmpeg binary is the peer")
def test_a_tiny_motion_run_sees_the_box_and_times_both_sides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["--motion", "--motion-seconds", "10", "--motion-sizes", "320x180",
                 "--runs", "1", "--json"])  # fmt: skip
    assert code == 0
    (size,) = json.loads(capsys.readouterr().out)["motion"]["sizes"]
    # The box is in the picture for the last 8 s of each 10 (40 of 50 frames); the first
    # frame only sets the background, and the trail the box leaves in the background
    # moves for a while after it has gone.
    assert size["frames"] == 50 and 30 <= size["moving_frames"][0] <= 49, size
    # Both sides were timed. The peer's figure is ffmpeg's CPU less its start-up, each
    # measured once: on 50 tiny frames the difference is within the noise, either sign.
    assert size["ours_cpu_per_s"]["median"] > 0
    assert math.isfinite(size["ffmpeg_cpu_per_s"]["median"])
