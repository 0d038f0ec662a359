"""The IP camera benchmark's rules, on made-up input: playlists, slice runs, the judge.

``python -m bench.ipcam`` takes minutes and a real RTSP server; here only its pure
parts are checked. A loss check that called a recording with a hole unbroken, a player
that put a part in the wrong segment, or a judge that called a step with a skipped
packet sustained would make the benchmark's verdicts worthless.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench._lib.look import Snapshot
from bench.ipcam.cpu import Window
from bench.ipcam.flow import IpcamFlow, flow_text, write_flow
from bench.ipcam.hls import parse_parts
from bench.ipcam.judge import (
    Step,
    checks,
    judged_n,
    largest_sustained,
    ratio,
    sustained,
    verdict,
)
from bench.ipcam.loss import continuity
from bench.ipcam.peer import PeerCamera, PeerRun, command
from bench.ipcam.profile import kind_of, main_thread_wall, parse
from bench.ipcam.report import report
from bench.ipcam.run import CameraRecord, MediaflowRun, jpeg_ages
from mediaflow.flows import load_flow

PLAYLIST = """#EXTM3U
#EXT-X-VERSION:9
#EXT-X-TARGETDURATION:4
#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.503
#EXT-X-PART-INF:PART-TARGET=0.501
#EXT-X-MEDIA-SEQUENCE:5
#EXT-X-MAP:URI="cam0/init.mp4"
#EXT-X-PROGRAM-DATE-TIME:2026-12-06T03:06:05.000Z
#EXT-X-PART:DURATION=0.50000,URI="cam0/8.m4s",INDEPENDENT=YES
#EXT-X-PART:DURATION=0.49999,URI="cam0/9.m4s"
#EXTINF:0.99999,
cam0/segment/5.m4s
#EXT-X-PROGRAM-DATE-TIME:2026-12-06T03:06:06.000Z
#EXT-X-PART:DURATION=0.50000,URI="cam0/10.m4s",INDEPENDENT=YES
"""


def test_parts_know_their_segment_index_and_capture_time() -> None:
    init, parts = parse_parts(PLAYLIST)
    assert init == "cam0/init.mp4"
    assert [(p.seq, p.msn, p.index, p.independent) for p in parts] == [
        (8, 5, 0, True),
        (9, 5, 1, False),
        (10, 6, 0, True),
    ]
    start = parts[0].capture_s
    assert start is not None
    assert parts[1].capture_s == pytest.approx(start + 0.5)
    assert parts[2].capture_s == pytest.approx(start + 1.0)
    assert parts[1].last_frame_s(0.04) == pytest.approx(start + 0.5 + 0.49999 - 0.04)


FILE = [bytes([n]) * 3 for n in range(10)]


@pytest.mark.parametrize(
    ("pieces", "first", "gaps", "repeated", "foreign", "unbroken"),
    [
        ([FILE[0:4], FILE[4:7], FILE[7:8]], 0, 0, 0, 0, True),
        ([FILE[2:4], FILE[4:7]], 2, 0, 0, 0, False),  # the head is lost
        ([FILE[0:4], FILE[5:7]], 0, 1, 0, 0, False),  # a slice between two pieces
        ([FILE[0:4], FILE[3:7]], 0, 0, 1, 0, False),  # a slice twice
        ([FILE[0:4], [FILE[4], FILE[6]]], 0, 0, 0, 1, False),  # a hole inside a piece
        ([FILE[0:4], None], 0, 0, 0, 1, False),  # an artifact that cannot be read
        ([], None, 0, 0, 0, False),
    ],
)
def test_a_recording_is_one_unbroken_run_of_the_file(
    pieces: list[list[bytes] | None],
    first: int | None,
    gaps: int,
    repeated: int,
    foreign: int,
    unbroken: bool,
) -> None:
    found = continuity(FILE, pieces)
    assert (found.first, found.gaps, found.repeated, found.foreign) == (
        first,
        gaps,
        repeated,
        foreign,
    )
    assert found.unbroken is unbroken


def test_holes_are_placed_in_the_file() -> None:
    assert continuity(FILE, [FILE[2:4], FILE[5:7], FILE[9:10]]).holes == [(0, 2), (4, 1), (7, 2)]


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ([0.5, 0.6, 0.7], "MET"),
        ([0.5, 1.1, 0.7], "BORDERLINE"),
        ([0.5, 1.3, 0.7], "MISSED"),
        ([0.5, None, 0.7], "MISSED"),
        ([0.5], "met in 1 run(s)"),
        ([None], "not measured"),
    ],
)
def test_a_ratio_target_needs_every_run_and_a_margin(values: list[float | None], said: str) -> None:
    assert verdict(values, 1.2, larger_is_better=False).startswith(said)


FLOW = IpcamFlow(2)


def snap(t: float, jpegs: int, segments: int, *, lost: int = 0, waiting: int = 0) -> Snapshot:
    emitted = {}
    for cam in FLOW.camera_nodes:
        emitted |= {f"{cam}.image": jpegs, f"{cam}.video": segments}
    return Snapshot(t, 0.0, 0, emitted, {"rec0": waiting}, {}, {}, {"cam1/video/video": lost})


def good_run() -> MediaflowRun:
    clean = continuity(FILE, [FILE[0:5], FILE[5:10]])
    records = [CameraRecord(cam, 5, 4, 4, 0, clean, clean) for cam in FLOW.camera_nodes]
    players = {cam: {"parts": 40, "holes": 0, "errors": [], "latencies": [0.07, 0.09]}
               for cam in FLOW.camera_nodes}  # fmt: skip
    return MediaflowRun(
        2,
        idle=Window(20.0, {"mediaflow": 0.16, "server": 0.04, "machine": 0.3}),
        live=Window(20.0, {"mediaflow": 0.17, "server": 0.04, "players": 0.01}),
        looks=[snap(0.0, 10, 2), snap(20.0, 30, 7)],
        look_s=[0.01, 0.02],
        ages=[{"cam0": 0.4, "cam1": 1.3}, {"cam0": 0.9, "cam1": 0.2}],
        players=players,
        records=records,
    )


def broken_clips(run: MediaflowRun) -> MediaflowRun:
    gap = continuity(FILE, [FILE[0:5], FILE[6:10]])
    return replace(run, records=[replace(run.records[0], clips_check=gap), run.records[1]])


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        (lambda run: run, []),
        (broken_clips, ["no packet lost (clips and segments vs the file)"]),
        (lambda run: replace(run, looks=[snap(0, 10, 2), snap(20, 30, 7, lost=3)]),
         ["nothing skipped in the window"]),
        (lambda run: replace(run, looks=[snap(0, 10, 2), snap(20, 25, 7)]), ["JPEGs at 1/s"]),
        (lambda run: replace(run, looks=[snap(0, 10, 2), snap(20, 30, 7, waiting=4)]),
         ["no backlog at the end"]),
        (lambda run: replace(run, idle=Window(20.0, {"mediaflow": 1.7, "server": 0.2})),
         ["headroom"]),
        (lambda run: replace(run, players={}), ["every camera watched live"]),
        (lambda run: replace(run, ages=[{"cam0": 0.4, "cam1": 3.5}]), ["JPEGs fresh"]),
        (lambda run: replace(run, ages=[{"cam0": 0.4}]), ["JPEGs fresh"]),
        (lambda run: replace(run, log_errors=["x ERROR y"]), ["no ERROR logged"]),
    ],
)  # fmt: skip
def test_a_step_is_sustained_only_when_every_check_passes(change, failed) -> None:  # type: ignore[no-untyped-def]
    run = change(good_run())
    assert [c.name for c in checks(FLOW, run, cores=2) if not c.ok] == failed
    assert sustained(FLOW, run, cores=2) is not failed


def test_the_largest_sustained_n_holds_in_every_run_and_the_report_says_so() -> None:
    flows = {2: FLOW, 4: IpcamFlow(4)}
    whole = continuity(FILE, [FILE[0:6], FILE[6:10]])
    outcomes = [PeerCamera(jpegs=20, segments=2, check=whole) for _ in range(2)]
    peer = PeerRun("ffmpeg", 2, Window(20.0, {"peer": 0.28, "server": 0.04}), outcomes)
    steps = [Step(run, 2, good_run(), {"ffmpeg": peer}) for run in (1, 2, 3)]
    steps.append(Step(1, 4, None))  # a step that was not measured fails its N
    assert largest_sustained(flows, steps, cores=2) == 2
    assert ratio(steps[0]) == pytest.approx(0.08 / 0.14)
    text = report(flows, steps, "heading")
    assert "| 2 | 0.080 (0.080-0.080) | 0.140 (0.140-0.140) | 0.57x (0.57x-0.57x) |" in text
    assert "CPU per camera ≤ 1.2x the peer's (ffmpeg, at 2 cameras): MET" in text
    assert "≥ 16 cameras sustained on 2 cores: not measured" in text
    starved = replace(outcomes[0], jpegs=12)  # a saturated machine starved the peer
    steps[1].peers["ffmpeg"] = replace(peer, outcomes=[starved, outcomes[1]])
    assert judged_n(flows, steps, cores=2) == (4, "neither kept up in every run anywhere")
    assert "ffmpeg did NOT keep up" in report(flows, steps, "heading")
    assert "in the clips: MISSED (4 steps checked; not checked: run 1 N=4" in text


def test_the_flow_loads_and_the_peer_command_is_the_issues(tmp_path: Path) -> None:
    url = "rtsp://127.0.0.1:8554/cam{}".format
    spec = load_flow(write_flow(tmp_path, FLOW, url))
    assert sorted(spec.nodes) == ["cam0", "cam1", "log0", "log1", "rec0", "rec1"]
    assert 'clip_s = 4\ninputs = { video = "cam1.video" }' in flow_text(FLOW, url, tmp_path)
    line = " ".join(command("rtsp://h/cam0", tmp_path, "ffmpeg", 4.0, 1.0))
    assert "-rtsp_transport tcp -i rtsp://h/cam0 -map 0:v -map 0:a -c copy" in line
    assert "-segment_time 4 -reset_timestamps 1" in line and "-vf fps=1 -q:v 3" in line
    keyframes = command("rtsp://h/cam0", tmp_path, "ffmpeg-keyframes", 4.0, 1.0)
    assert keyframes.index("-skip_frame") < keyframes.index("-i")


RAW = """thread (11): MainThread;run (mediaflow/eventloop.py:67);Runner.run (asyncio/x.py:1) 70
thread (11): MainThread;_finish (mediaflow/nodes/recorder.py:286);rmtree (shutil.py:736) 30
thread (12): segments rtsp://127.0.0.1:5/cam0;EncodeLane._run (connectors/_lanes.py:164) 9
thread (13): mediaflow-io_3;_worker (concurrent/futures/thread.py:81) 4
"""


def test_a_profile_names_thread_kinds_and_the_loops_wall_time() -> None:
    samples = parse(RAW)
    assert sorted({kind_of(name) for name in samples.names.values()}) == [
        "MainThread",
        "mediaflow-io_N",
        "segments",
    ]
    assert main_thread_wall(samples) == {
        "Runner.run (asyncio/x.py:1)": 0.7,
        "rmtree (shutil.py:736)": 0.3,
    }


def test_jpeg_ages_come_from_the_latest_images_capture_time() -> None:
    image = {"latest": {"digest": "sha256:00", "meta": {"captured_at": 100.0, "seq": 4}}}
    body = {
        "nodes": [
            {"id": "cam0", "outputs": {"image": image, "video": {"latest": None}}},
            {"id": "rec0", "outputs": {"video": {"latest": None}}},
        ]
    }
    assert jpeg_ages(body, 101.5) == {"cam0": 1.5}
