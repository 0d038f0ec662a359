"""Exporting a recorded range as one MP4: real clips made by the recorder in a flow.

The camera copies a file whose pictures say their frame number and whose sound beeps
at every whole second (:mod:`bench.timeline.media`), into 6 s clips of 2 s segments
with a keyframe every second; the clips are laid back to back from ``ORIGIN`` (a
source read faster than real time is stamped with arrival times). So the frame shown
at wall time ``ORIGIN + t`` is number ``ceil(t * FPS)``, and beep ``k`` goes with
frame ``k * FPS``.
"""

from __future__ import annotations

import struct
import subprocess
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bench.timeline.media import shown
from mediaflow.cli import main
from mediaflow.store import ArtifactStore
from mediaflow.timeline import (
    ExportOptions,
    NothingRecorded,
    RangeTooLong,
    TimelineIndex,
    export_clips,
    export_recording,
)
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.http_support import serve
from tests.timeline_support import (  # noqa: F401 - fixtures
    FLOW,
    FPS,
    FRAME,
    NODE,
    ORIGIN,
    Recording,
    index_fixture,
    number_at,
    recording_fixture,
)

if TYPE_CHECKING:
    from playwright.async_api import Page


def edit_lists(path: Path) -> list[list[tuple[int, int]]]:
    """Each track's ``elst`` entries, ``(segment duration, media time)``."""
    data = path.read_bytes()
    found, at = [], data.find(b"elst")
    while at >= 0:
        version, count = data[at + 4], struct.unpack(">I", data[at + 8 : at + 12])[0]
        form, size = (">IiHH", 12) if version == 0 else (">QqHH", 20)
        entries = [struct.unpack(form, data[at + 12 + size * k : at + 12 + size * (k + 1)])
                   for k in range(count)]  # fmt: skip
        found.append([(e[0], e[1]) for e in entries])
        at = data.find(b"elst", at + 4)
    return found


def test_an_export_across_clips_shows_start_to_end_to_the_frame(
    recording: Recording, index: TimelineIndex, tmp_path: Path
) -> None:
    start, end = 4.5, 16.3  # mid-GOP in the first clip, through a whole one, into a third
    out = tmp_path / "range.mp4"
    result = export_recording(
        index, ArtifactStore(recording.data_dir), FLOW, NODE, ORIGIN + start, ORIGIN + end, out
    )
    assert result.path == out and result.gaps == () and len(result.clips) == 3
    assert result.first_keyframe - ORIGIN == pytest.approx(4.0, abs=1e-3)  # keyframe before
    assert result.begins_at - ORIGIN == pytest.approx(start, abs=FRAME)
    assert result.duration == pytest.approx(end - start, abs=FRAME)
    frames = shown(out, sound=False).frames
    numbers = [n for _, n in frames]
    assert numbers[0] == pytest.approx(number_at(start), abs=1)
    assert numbers[-1] == pytest.approx(number_at(end) - 1, abs=1)
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # none lost, none twice
    assert frames[0][0] == pytest.approx(0.0, abs=1e-3)
    assert len(frames) == pytest.approx((end - start) * FPS, abs=1)
    # The pre-roll (4.0 to 4.5 s) is in the file, hidden by each track's edit list.
    video_list, audio_list = edit_lists(out)
    assert len(video_list) == 1 and video_list[0][1] > 0
    assert len(audio_list) == 1 and audio_list[0][1] > 0
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "stream=codec_name,start_time",
         "-of", "csv=p=0", str(out)],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert sorted(probe) == ["aac,0.000000", "h264,0.000000"]
    decoded = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(out), "-f", "null", "-"], capture_output=True, text=True
    )  # fmt: skip
    assert decoded.returncode == 0 and decoded.stderr == ""


def test_the_sound_is_in_step_with_the_picture(recording: Recording, tmp_path: Path) -> None:
    out = tmp_path / "sound.mp4"
    export_clips(recording.files(), ORIGIN + 2.3, ORIGIN + 20.6, out)
    seen = shown(out)
    assert seen.audio_start == pytest.approx(0.0, abs=0.001)
    time_of = {number: at for at, number in seen.frames}
    beeps = [b for b in seen.beeps if b > 0.2]  # not one cut at the very start
    assert len(beeps) == 18  # 3 s to 20 s, across three clip seams
    for beep in beeps:
        second = round(number_at(2.3) / FPS + beep)  # the whole second it marks
        assert abs(beep - time_of[second * FPS]) <= 0.040, (second, beep)


def test_a_missing_clip_is_a_gap_closed_up(recording: Recording, tmp_path: Path) -> None:
    files = [f for f in recording.files() if round(f.clip.start - ORIGIN) != 12]
    out = tmp_path / "gap.mp4"
    result = export_clips(files, ORIGIN + 9.0, ORIGIN + 21.0, out)
    assert [(round(a - ORIGIN, 3), round(b - ORIGIN, 3)) for a, b in result.gaps] == [(12, 18)]
    assert result.duration == pytest.approx(6.0, abs=FRAME)
    numbers = [n for _, n in shown(out, sound=False).frames]
    assert numbers[0] == number_at(9.0) and numbers[-1] == number_at(21.0) - 1
    jump = numbers.index(number_at(18.0))
    assert numbers[jump - 1] == number_at(12.0) - 1  # 12 s to 18 s closed up


def test_an_evicted_clip_is_a_gap_and_named(
    recording: Recording, index: TimelineIndex, tmp_path: Path
) -> None:
    gone = recording.clips[1].ref.digest

    class Evicted:
        def path_for(self, digest: str) -> Path:
            real = ArtifactStore(recording.data_dir).path_for(digest)
            return tmp_path / "evicted" if digest == gone else real

    result = export_recording(
        index, Evicted(), FLOW, NODE, ORIGIN + 3, ORIGIN + 15, tmp_path / "evicted.mp4"
    )
    assert [c.ref.digest for c in result.missing] == [gone]
    assert [(round(a - ORIGIN, 3), round(b - ORIGIN, 3)) for a, b in result.gaps] == [(6, 12)]


def test_what_is_refused_leaves_no_file(
    recording: Recording, index: TimelineIndex, tmp_path: Path
) -> None:
    store = ArtifactStore(recording.data_dir)
    out = tmp_path / "never.mp4"
    with pytest.raises(NothingRecorded, match="recorded nothing between"):
        export_recording(index, store, FLOW, NODE, ORIGIN - 60, ORIGIN - 1, out)
    with pytest.raises(RangeTooLong):
        options = replace(ExportOptions(), max_span_s=10)
        export_recording(index, store, FLOW, NODE, ORIGIN, ORIGIN + 11, out, options=options)
    assert list(tmp_path.iterdir()) == []


def iso(t: float) -> str:
    return datetime.fromtimestamp(ORIGIN + t, UTC).isoformat().replace("+00:00", "Z")


def test_the_command_writes_the_range_and_prints_its_gaps(
    recording: Recording, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli.mp4"
    data = ["--data", str(recording.data_dir)]
    code = main(["export", FLOW, NODE, "--start", iso(-5), "--end", str(ORIGIN + 7.0),
                 "-o", str(out), *data])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    lines = printed.out.splitlines()
    assert lines[0].startswith(f"wrote {out}: 7.000 s from ") and "2 clips" in lines[0]
    assert lines[1].startswith("  gap: ") and "(5.000 s, closed up)" in lines[1]
    assert [n for _, n in shown(out, sound=False).frames][:1] == [0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--start", "yesterday", "--end", "1"], "time 'yesterday' is not ISO 8601"),
        (["--start", "5", "--end", "5"], "is not before"),
        (["--start", "1", "--end", "100"], "recorded nothing between"),
        (["--start", str(ORIGIN), "--end", str(ORIGIN + 90_000)], "at most 86,400 s"),
    ],
)
def test_the_command_refuses_bad_input_in_one_line(
    recording: Recording,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    words: str,
) -> None:
    code = main(["export", FLOW, NODE, *args, "-o", str(tmp_path / "x.mp4"),
                 "--data", str(recording.data_dir)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err
    assert not (tmp_path / "x.mp4").exists()


@pytest.mark.parametrize(
    ("flow", "node", "words"),
    [("nope", NODE, "flow 'nope' recorded nothing"), (FLOW, "cam", "has no recorder 'cam'")],
)
def test_the_command_names_an_unknown_flow_or_recorder(
    recording: Recording, tmp_path: Path, capsys: pytest.CaptureFixture[str], flow: str,
    node: str, words: str,
) -> None:  # fmt: skip
    code = main(["export", flow, node, "--start", str(ORIGIN), "--end", str(ORIGIN + 5),
                 "-o", str(tmp_path / "x.mp4"), "--data", str(recording.data_dir)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err


READ_NUMBER = """async ([src, seekTo]) => {
    const v = document.createElement('video');
    v.muted = true;
    document.body.appendChild(v);
    const once = (name) => new Promise((ok, fail) => {
        v.addEventListener(name, () => ok(name), {once: true});
        v.addEventListener('error', () => fail(String(v.error && v.error.message)),
                           {once: true});
    });
    const number = () => {  // bench.timeline.media's grid: 8 x 4 blocks, one bit each
        const c = document.createElement('canvas');
        c.width = v.videoWidth; c.height = v.videoHeight;
        const g = c.getContext('2d');
        g.drawImage(v, 0, 0);
        const bw = Math.floor(c.width / 8), bh = Math.floor(c.height / 4);
        let n = 0;
        for (let bit = 0; bit < 32; bit++) {
            const x = (bit % 8) * bw + (bw >> 1), y = Math.floor(bit / 8) * bh + (bh >> 1);
            if (g.getImageData(x, y, 1, 1).data[0] > 128) n += 2 ** bit;
        }
        return n;
    };
    const at = async (t) => {  // a frame is drawable once a seek to it has finished
        const seeked = once('seeked');
        v.currentTime = t;
        await seeked;
        return number();
    };
    const loaded = once('loadeddata');
    v.src = src;
    await loaded;
    const first = await at(0);
    return {duration: v.duration, first, there: await at(seekTo)};
}"""


async def test_chromium_begins_at_the_asked_start_and_seeks_in_the_export(
    recording: Recording, tmp_path: Path, page: Page
) -> None:
    start, end = 7.3, 19.7  # from mid-GOP of the second clip, into the fourth
    out = tmp_path / "browser.mp4"
    export_clips(recording.files(), ORIGIN + start, ORIGIN + end, out)
    ref = await ArtifactStore(recording.data_dir).save(out, "video/mp4")
    async with serve(recording.data_dir) as served:
        await page.goto(f"{served.url}/healthz")
        seen = await page.evaluate(READ_NUMBER, [f"{served.url}/artifacts/{ref.digest}", 6.0])
    assert seen["duration"] == pytest.approx(end - start, abs=FRAME)
    assert seen["first"] == pytest.approx(number_at(start), abs=1)  # the edit list honoured
    assert seen["there"] == pytest.approx(number_at(start + 6.0), abs=1)
    assert not page_errors(page)
