"""The live benchmark's rules: playlists, onsets, pairing, the judge; one short real run.

``python -m bench.live`` takes minutes; here its pure parts are checked on made-up
input (an onset found a frame late or a beep paired with the wrong flash would make
its A/V offset worthless, and a judge that calls a run inside the margin MET would
make its verdict so), a clip made with ffmpeg is decoded for real, and one run with
windows of a second or two goes through every step (flow, HLS and WHEP viewers, the
floor and GStreamer's webrtcbin, Chromium when present, the file's own sound,
ffmpeg's HLS) to prove each yields the numbers the report needs. Whether those
numbers meet the targets on a busy machine is the benchmark's question, not the
test's. The WebRTC figures' own rules are in ``tests/test_bench_live_webrtc.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from bench.live.browser import BrowserResult, unavailable
from bench.live.cpu import PeerResult, Usage
from bench.live.flow import LiveFlow, clip_flow_text, make_clip, write_flow
from bench.live.hls import (
    RecordedPart,
    ViewerStats,
    fragment_times,
    newest_start,
    parse_playlist,
)
from bench.live.judge import figures, quantiles, report, spread, verdict
from bench.live.run import RunConfig, RunResult, ViewerWindow, WhepWindow, run_once
from bench.live.sync import (
    Decoded,
    Event,
    Floats,
    analyse,
    anchors,
    audio_onsets,
    decode,
    events,
    file_offsets,
    offsets,
    paired,
    rms_windows,
    stream_origin,
    video_onsets,
)
from mediaflow.flows import load_flow
from mediaflow.live import Sample, TrackRun, fragment
from tests.live_helpers import tool

MEDIAFLOW_PLAYLIST = """#EXTM3U
#EXT-X-VERSION:9
#EXT-X-TARGETDURATION:2
#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.935
#EXT-X-PART-INF:PART-TARGET=0.645
#EXT-X-MEDIA-SEQUENCE:5
#EXT-X-MAP:URI="cam/init.mp4"
#EXT-X-PROGRAM-DATE-TIME:2026-12-02T16:57:16.554Z
#EXT-X-PART:DURATION=0.50000,URI="cam/20.m4s",INDEPENDENT=YES
#EXT-X-PART:DURATION=0.64500,URI="cam/21.m4s"
#EXTINF:1.14500,
cam/segment/5.m4s
#EXT-X-PROGRAM-DATE-TIME:2026-12-02T16:57:17.699Z
#EXT-X-PART:DURATION=0.50000,URI="cam/24.m4s",INDEPENDENT=YES
"""
FFMPEG_PLAYLIST = """#EXTM3U
#EXT-X-VERSION:7
#EXT-X-MEDIA-SEQUENCE:1796230766878314
#EXT-X-MAP:URI="init.mp4"
#EXTINF:0.466667,
#EXT-X-PROGRAM-DATE-TIME:2026-12-02T16:59:26.878+0000
out1796230766878314.m4s
#EXTINF:0.500000,
#EXT-X-PROGRAM-DATE-TIME:2026-12-02T16:59:27.345+0000
out1796230766878315.m4s
"""
T0 = 1796230636.554  # 2026-12-02T16:57:16.554Z
Sound = list[tuple[float, npt.NDArray[np.float32], int]]


def test_mediaflow_s_playlist_gives_numbers_times_and_keyframe_parts() -> None:
    listed = parse_playlist(MEDIAFLOW_PLAYLIST)
    assert listed.init == "cam/init.mp4"
    # parts, not segments; not the 4 of ".m4s"
    assert [p.seq for p in listed.parts] == [20, 21, 24]
    assert [p.independent for p in listed.parts] == [True, False, True]
    assert listed.parts[0].pdt == pytest.approx(T0)
    assert listed.parts[1].pdt == pytest.approx(T0 + 0.5)  # its segment's, plus part 20
    assert listed.parts[1].end == pytest.approx(T0 + 0.5 + 0.645)
    assert newest_start(listed) == 24


def test_ffmpeg_s_playlist_dates_the_next_uri_whatever_the_tag_order() -> None:
    listed = parse_playlist(FFMPEG_PLAYLIST)
    assert [p.seq for p in listed.parts] == [1796230766878314, 1796230766878315]
    assert [p.duration for p in listed.parts] == [0.466667, 0.5]
    assert listed.parts[1].pdt == pytest.approx(T0 + 130.791)
    assert newest_start(listed) == 1796230766878314  # nothing marked: any part
    assert newest_start(parse_playlist("#EXTM3U\n")) is None


def test_a_part_s_decode_times_per_track() -> None:
    video = TrackRun(1, 2**33 + 90, [Sample(b"\x00\x00\x00\x01\x65", 3000, True)])
    audio = TrackRun(2, 16000, [Sample(b"\x21\x00", 1024, True)])
    assert fragment_times(fragment(7, [video, audio])) == {1: 2**33 + 90, 2: 16000}
    with pytest.raises(ValueError, match="no moof"):
        fragment_times(b"\x00\x00\x00\x08free")


def flashes(seconds: int, fps: int = 30, *, drop: int | None = None) -> tuple[Floats, Floats]:
    """Box levels of a camera flashing for 3 frames each second; frame ``drop`` lost."""
    frames = [i for i in range(seconds * fps) if i != drop]
    times = np.array([i / fps for i in frames]) + 10.0
    levels = np.array([235.0 if i % fps < 3 else 80.0 + (i % 7) for i in frames])
    return times, levels


def test_a_flash_starts_on_its_first_bright_frame() -> None:
    times, levels = flashes(4)
    # The first flash is the recording's first frame: nothing says it started there.
    assert video_onsets(times, levels) == pytest.approx([11.0, 12.0, 13.0])


def test_a_flash_after_a_lost_frame_is_not_timed() -> None:
    times, levels = flashes(4, drop=59)  # the dark frame just before the flash at 12.0
    assert video_onsets(times, levels) == pytest.approx([11.0, 13.0])


def test_a_picture_without_contrast_has_no_flash() -> None:
    times, _ = flashes(3)
    assert video_onsets(times, 80.0 + np.sin(times)) == []


def beeps(seconds: float, rate: int = 16000, start: float = 5.0, lead: float = 0.5) -> Sound:
    """Decoded frames (1024 samples) of a beep of 0.1 s every second from ``lead``."""
    t = np.arange(int(seconds * rate)) / rate
    sound = np.where((t - lead) % 1.0 < 0.1, 0.5 * np.sin(2 * np.pi * 1000 * t), 0.0)
    sound += 0.001 * np.random.default_rng(1).standard_normal(len(t))  # a little hiss
    return [
        (start + i / rate, sound[i : i + 1024].astype(np.float32), rate)
        for i in range(0, len(t) - 1023, 1024)
    ]


def test_a_beep_starts_on_its_first_loud_millisecond() -> None:
    times, rms = rms_windows(beeps(3.5))
    assert len(times) == len(rms) and times[1] - times[0] == pytest.approx(0.001)
    found = audio_onsets(times, rms)
    assert found == pytest.approx([5.5, 6.5, 7.5], abs=0.0011)
    # The first beep of a recording needs its quiet before it, too.
    found = audio_onsets(*rms_windows(beeps(2.5, lead=0.2)))  # 5.2 is too early
    assert found == pytest.approx([6.2, 7.2], abs=0.0011)


def test_a_beep_after_a_hole_in_the_sound_is_not_timed() -> None:
    frames = beeps(3.5)
    del frames[20:23]  # ~190 ms missing just before the beep at 6.5
    assert audio_onsets(*rms_windows(frames)) == pytest.approx([5.5, 7.5], abs=0.0011)
    assert audio_onsets(np.zeros(0), np.zeros(0)) == []


def test_errors_are_against_the_nearest_source_second_and_pair_by_when_made() -> None:
    cam, mic = 1000.0, 1000.3  # the sources' captured_at - pts
    origin = 990.0  # stream second 0 on the capture clock
    video = events([10.002, 11.0, 13.001], origin, cam)
    audio = events([10.33, 11.33, 12.33], origin, mic)
    assert [(e.second, round(e.error, 4)) for e in video] == [(0, 0.002), (1, 0.0), (3, 0.001)]
    assert [(e.second, round(e.error, 4)) for e in audio] == [(0, 0.03), (1, 0.03), (2, 0.03)]
    # Flash 3 was made 0.7 s from beep 2: no pair (beep 3 is missing).
    assert offsets(video, audio, cam, mic) == pytest.approx([0.028, 0.03])
    flash, beep = Event(3, 0.0, 0.002), Event(0, 0.0, 0.0)  # made 2.4 s apart
    assert offsets([flash], [beep], cam, cam + 0.6) == []


def test_a_file_s_flashes_and_beeps_pair_on_one_clock() -> None:
    assert paired([1.0, 2.0, 3.0], [0.9, 1.9, 3.7]) == pytest.approx([-0.1, -0.1])
    assert paired([1.0], []) == []


def test_events_captured_before_the_viewer_came_are_left_out() -> None:
    times, levels = flashes(4)  # stream seconds 10 to 14: flashes found at 11, 12, 13
    sound = rms_windows(beeps(4.0, start=10.0, lead=0.3))  # beeps at 11.3, 12.3, 13.3
    parts = [RecordedPart(1, 0, 1010.0, 0.5, {1: 10 * 90000, 2: 10 * 16000})]
    decoded = Decoded(times, levels, *sound)
    # Stream second 0 is 1000.0 on the capture clock; the viewer came at 1011.4.
    found = analyse(decoded, parts, [1000.0, 1000.0002], [1000.3], started=1011.4)
    assert [e.second for e in found.video] == [12, 13]
    assert [e.second for e in found.audio] == [12, 13]
    assert found.offsets == pytest.approx([0.0, 0.0], abs=0.0011)
    assert found.anchor_spread == pytest.approx(0.0002)
    everything = analyse(decoded, parts, [1000.0], [1000.3])
    assert [e.second for e in everything.video] == [11, 12, 13]
    # A file's flashes and beeps are paired on the stream's clock, after the viewer came.
    assert file_offsets(decoded, parts, started=1011.4) == pytest.approx([0.3, 0.3], abs=0.0011)
    assert len(file_offsets(decoded, parts)) == 3


def test_the_stream_origin_is_the_median_of_dated_parts() -> None:
    parts = [
        RecordedPart(1, 0, 100.501, 0.5, {1: 45000, 2: 8000}),
        RecordedPart(2, 9, 101.000, 0.5, {1: 90000}),
        RecordedPart(3, 9, 101.5, 0.5, {1: 135000}),
        RecordedPart(4, 9, None, 0.5, {1: 180000}),
    ]
    origin, spread_s = stream_origin(parts)
    assert origin == pytest.approx(100.0) and spread_s == pytest.approx(0.001)
    with pytest.raises(ValueError):
        stream_origin(parts[3:])


def test_anchors_come_from_the_latest_items_meta() -> None:
    def port(pts: float, captured: float) -> dict[str, object]:
        return {"latest": {"meta": {"pts": pts, "captured_at": captured}}}

    body = {
        "nodes": [
            {"id": "cam", "outputs": {"image": port(7.0, 107.5), "video": port(4.0, 104.5)}},
            {"id": "mic", "outputs": {"audio": port(7.1, 107.0)}},
            {"id": "rec", "outputs": {"video": port(0.0, 1.0)}},
            {"id": "cam2", "outputs": {"image": {"latest": None}}},
        ]
    }
    assert anchors(body) == {"cam": [100.5, 100.5], "mic": [pytest.approx(99.9)]}


def test_quantiles_and_spread() -> None:
    assert quantiles([]) is None
    assert quantiles([float(x) for x in range(1, 101)]) == (50.0, 95.0, 100.0)
    assert spread([2.0, None, 1.0, 4.0], str) == "2.0 (min 1.0, max 4.0; 3 runs)"
    assert spread([None], str) == "-"


@pytest.mark.parametrize(
    ("values", "runs", "said"),
    [
        ([1.2, 1.3, 1.34], 3, "MET"),
        ([1.2, 1.4, 1.3], 3, "BORDERLINE"),  # 1.4 is within 10 % of 1.5
        ([1.2, 1.6, 1.3], 3, "MISSED"),
        ([1.2, None, 1.3], 3, "MISSED"),  # a run that did not measure it
        ([1.0], 1, "met in 1 run(s)"),
        ([], 0, "not measured"),
    ],
)
def test_a_target_is_met_only_with_margin_in_every_run(
    values: list[float | None], runs: int, said: str
) -> None:
    assert verdict(values, 1.5, runs).startswith(said)


def made_up_run(index: int, idle: float, many: float) -> RunResult:
    run = RunResult(index)
    run.idle = Usage(20.0, idle - 0.01, 1.0)
    run.idle_after = Usage(20.0, idle + 0.01, 1.0)  # the machine drifted a little
    run.one = ViewerWindow(1, Usage(20.0, idle + 0.01, 1.0), [ViewerStats(lags=[0.1, 0.12])])
    run.many = ViewerWindow(10, Usage(20.0, many, 1.2), [ViewerStats(lags=[0.11])] * 10)
    run.browser = BrowserResult(latencies=[1.0] * 96 + [1.4] * 4, usage=Usage(20.0, 0.5, 1.5))
    run.peer = PeerResult(Usage(20.0, 0.3, 1.0), lags=[0.15, 0.16, 0.2], segments=3)
    run.clip_offsets = [-0.1, -0.1, -0.099]
    run.whep = WhepWindow(10, Usage(20.0, idle + 0.02, 1.1))
    run.whep_again = WhepWindow(10, Usage(20.0, idle + 0.04, 1.1))
    run.whep_floor = {"cores": 0.01, "sent": 38000, "received": 38000}
    run.whep_gst = {"viewers": 10, "idle_cores": 0.02, "viewers_cores": 0.08}
    run.browser_webrtc = BrowserResult(
        "webrtc",
        latencies=[0.2] * 95 + [0.25] * 5,
        to_browser=[0.1] * 100,
        in_browser=[0.1] * 95 + [0.15] * 5,
        rtp_stats={"jitterBufferDelay": 8.0, "jitterBufferEmittedCount": 100.0},
        usage=Usage(20.0, 0.45, 1.5),
    )
    return run


def test_webrtc_figures() -> None:
    got = figures(made_up_run(1, 0.40, 0.43), viewers=10)
    assert got["webrtc_p50"] == 0.2 and got["webrtc_p95"] == 0.2 and got["webrtc_max"] == 0.25
    assert got["webrtc_to_browser"] == 0.1 and got["webrtc_in_browser_p95"] == 0.1
    assert got["webrtc_jitter_buffer"] == pytest.approx(0.08)
    assert got["cpu_whep"] == pytest.approx(0.43)
    assert got["cpu_whep_added"] == pytest.approx(0.03)
    assert got["cpu_whep_increase"] == pytest.approx(0.075)
    assert got["cpu_whep_floor"] == 0.01 and got["cpu_whep_floor_share"] == pytest.approx(0.025)
    assert got["cpu_whep_gst_added"] == pytest.approx(0.06)  # its own CPU with less without
    assert got["cpu_whep_gst_share"] == pytest.approx(0.15)  # against the flow's idle
    assert got["cpu_whep_vs_gst"] == pytest.approx(0.5)


def test_a_run_s_figures_and_the_report() -> None:
    runs = [made_up_run(i, 0.40, 0.43) for i in (1, 2, 3)]
    got = figures(runs[0], viewers=10)
    assert got["latency_p95"] == 1.0 and got["latency_max"] == 1.4
    assert got["cpu_idle"] == pytest.approx(0.40) and got["cpu_idle_drift"] == pytest.approx(0.02)
    assert got["cpu_stream"] == pytest.approx(0.01)
    assert got["cpu_per_viewer"] == pytest.approx(0.02 / 9)
    assert got["cpu_increase"] == pytest.approx(0.075)
    assert got["cpu_vs_peer"] == pytest.approx(0.41 / 0.3)
    assert got["lag_one"] == pytest.approx(0.11) and got["lag_peer"] == 0.16
    assert got["clip_offset"] == pytest.approx(-0.1) and got["clip_offset_abs"] == 0.1
    assert "av_offset" not in got  # nothing recorded: not measured, not zero
    text = report(runs, 10, "heading")
    assert "glass-to-glass p95 ≤ 1.5 s (Chromium, 0.5 s parts): MET" in text
    assert "camera + microphone against their capture facts (median): not measured" in text
    assert "against the file (median): MISSED" in text
    assert "ten viewers add < 10 % CPU (vs no viewer): MET" in text
    assert "WebRTC (WHEP) glass-to-glass p95 ≤ 300 ms (Chromium): MET" in text
    assert "ten WHEP viewers add < 10 % CPU (vs no viewer): MET" in text


def test_the_flows_load(tmp_path: Path) -> None:
    spec = load_flow(write_flow(tmp_path, LiveFlow()))
    assert sorted(spec.nodes) == ["cam", "mic", "rec"]
    clip = tmp_path / "clip.mkv"
    clip.write_bytes(b"")  # the flow is checked, not the file
    assert 'connector = "file"' in clip_flow_text(clip, LiveFlow())


def test_a_made_clip_decodes_with_flashes_and_beeps_together(tmp_path: Path) -> None:
    tool("ffmpeg")
    clip = make_clip(tmp_path / "clip.mkv", LiveFlow(), 3.5)
    decoded = decode(clip)
    found = video_onsets(decoded.video_times, decoded.video_levels)
    assert found == pytest.approx([1.0, 2.0, 3.0], abs=0.001)
    beeped = audio_onsets(decoded.audio_times, decoded.audio_rms)
    assert paired(found, beeped) == pytest.approx([0.0, 0.0, 0.0], abs=0.0015)


@pytest.mark.slow
def test_one_short_run_measures_every_section(tmp_path: Path) -> None:
    tool("ffmpeg")
    flow = LiveFlow()
    browser = unavailable() is None
    config = RunConfig(1.0, 2.0, 1.5, viewers=2, browser=browser, idle_after=False, clip_s=4.0)
    clip = make_clip(tmp_path / "clip.mkv", flow, 10.0)
    run = run_once(flow, config, tmp_path / "run", 1, lambda _: None, clip)
    assert run.errors == [] and run.log_errors == [], (run.errors, run.log_errors)
    got = figures(run, config.viewers)
    assert run.idle_after is None  # (a second idle window waits 11 s: the bench's, not ours)
    for key in ("cpu_idle", "cpu_one", "cpu_many", "cpu_peer", "lag_one", "lag_peer"):
        assert got[key] is not None and got[key] > 0, key  # type: ignore[operator]
    assert run.sync is not None and len(run.sync.offsets) >= 2, run.sync
    assert got["av_offset_abs"] is not None and got["av_offset_abs"] < 0.5
    assert run.clip_offsets, "no flash and beep found in the file's live stream"
    assert run.peer is not None and run.peer.segments >= 3
    assert run.whep is not None and run.whep.usage is not None and not run.whep.errors, run.whep
    assert run.whep.counts["video"]["frames"] > 0, run.whep.counts
    assert got["cpu_whep_increase"] is not None
    assert run.whep_floor is not None and run.whep_floor["sent"] > 0, run.whep_floor
    assert run.whep_floor["received"] == run.whep_floor["sent"], run.whep_floor
    gst = run.whep_gst  # GStreamer's webrtcbin sent its clip to as many aiortc viewers
    assert gst is not None and gst["counts"]["video"]["frames"] > 0, gst
    assert gst["counts"]["audio"]["frames"] > 0 and got["cpu_whep_gst_added"] is not None
    if config.browser:
        assert run.browser is not None and run.browser.error is None, run.browser
        assert len(run.browser.latencies) > 10
        assert 0.0 < got["latency_p50"] < 5.0  # type: ignore[operator]
        web = run.browser_webrtc  # the wall played WebRTC, and a flash placed its frames
        assert web is not None and web.error is None and web.transport == "webrtc", web
        assert web.flashes >= 1 and len(web.latencies) > 10
        assert 0.0 < got["webrtc_p50"] < 5.0  # type: ignore[operator]
