"""The scale benchmark's rules: its flow, its judge and its profile areas; one real rung.

``python -m bench.scale`` climbs the ladder for a quarter of an hour; here its pure
parts are checked on made-up looks (a judge that passes a camera emitting 29 frames
a second or a speech node with a growing backlog would make the benchmark's answer
worthless), and one small rung runs for real, a few seconds, to prove the looks it
takes of a running flow parse into the numbers the judge needs. Whether that rung
keeps up on a busy CI machine is the benchmark's question, not the test's.
"""

from __future__ import annotations

from pathlib import Path

from bench._lib.flow_process import GcEnv
from bench._lib.look import Snapshot, snapshot
from bench._lib.threads import window_cpu
from bench.scale.flow import ScaleFlow, write_flow
from bench.scale.judge import judge, sustained
from bench.scale.profile import NATIVE, OTHER, area_of, attribute, parse_raw
from bench.scale.run import run_rung
from mediaflow.flows import load_flow

FLOW = ScaleFlow(cameras=2, microphones=3)


def look(t: float, k: float, **changes: object) -> Snapshot:
    """A look at FLOW after ``t`` seconds of running exactly at its nominal rates,
    ``k`` times as fast; ``changes`` override fields."""
    emitted = {
        f"{node}.{port}": int(rate * t * k)
        for node, ports in FLOW.sources().items()
        for port, rate in ports.items()
    }
    started = {node: int(rate * t * k) for node, rate in FLOW.consumers().items()}
    latency = {node: (count, count * 0.004) for node, count in started.items()}
    fields: dict[str, object] = {
        "t": t,
        "cpu_s": t * 1.5,
        "rss": 600 << 20,
        "emitted": emitted,
        "ready": {node: 1 for node in started},
        "started": started,
        "latency": latency,
        "losses": {"cam0/video/jpeg": 0},
        "transcripts": int(t),
    }
    fields.update(changes)
    return Snapshot(**fields)  # type: ignore[arg-type]


def failed(checks: list) -> list[str]:  # type: ignore[type-arg]
    return [check.name for check in checks if not check.ok]


def test_the_flow_file_loads_with_every_node_and_wire(tmp_path: Path) -> None:
    spec = load_flow(write_flow(tmp_path, FLOW))
    ids = sorted(spec.nodes)
    assert ids == sorted(["cam0", "cam1", "mic0", "mic1", "mic2", "asr0", "asr1", "asr2", "rec0"])
    assert FLOW.sources()["cam1"] == {"image": 30.0, "video": 0.5}
    assert FLOW.consumers() == {"asr0": 10.0, "asr1": 10.0, "asr2": 10.0, "rec0": 10.5}


def test_a_run_at_nominal_rates_is_sustained() -> None:
    checks = judge(FLOW, look(10, 1.0), look(55, 1.0))
    assert sustained(checks), [check.line() for check in checks]


def test_a_source_short_of_real_time_fails() -> None:
    late = look(55, 1.0)
    late.emitted["cam1.image"] = 30 * 10 + 29 * 45  # 29 frames/s over the window
    assert failed(judge(FLOW, look(10, 1.0), late)) == ["sources in real time"]


def test_a_frame_skipped_at_capture_fails() -> None:
    lossy = look(55, 1.0, losses={"cam0/video/jpeg": 1})
    assert failed(judge(FLOW, look(10, 1.0), lossy)) == ["nothing lost at capture"]


def test_a_consumer_falling_behind_fails_on_rate_latency_and_backlog() -> None:
    behind = look(55, 1.0)
    behind.started["asr2"] = 10 * 10 + 9 * 45
    behind.latency["asr2"] = (behind.started["asr2"], behind.started["asr2"] * 0.8)
    behind.ready["asr2"] = 45
    assert failed(judge(FLOW, look(10, 1.0), behind)) == [
        "consumers keep up",
        "emit -> start latency",
        "backlog at the end",
    ]


def test_silence_and_errors_fail() -> None:
    checks = judge(FLOW, look(10, 1.0), look(55, 1.0, transcripts=10), errors=2)
    assert failed(checks) == ["speech heard", "no errors logged"]


def test_a_snapshot_reads_the_api_and_the_metrics() -> None:
    body = {
        "nodes": [
            {"id": "cam0", "outputs": {"image": {"seq": 900}, "video": {"seq": 15}}},
            {"id": "asr0", "outputs": {"text": {"seq": 3}}, "backlog": {"ready": 4}},
        ]
    }
    metrics = {
        'mediaflow_node_items_started_total{flow="scale",node="asr0"}': 310.0,
        'mediaflow_emit_to_start_seconds_count{flow="scale",node="asr0"}': 310.0,
        'mediaflow_emit_to_start_seconds_sum{flow="scale",node="asr0"}': 1.5,
        'mediaflow_capture_losses_total{flow="scale",node="cam0",device="d",media="video",'
        'stage="jpeg"}': 2.0,
        'mediaflow_events_total{type="transcript"}': 7.0,
        'mediaflow_events_total{type="latest"}': 70.0,
    }
    seen = snapshot(3.0, 1.0, 5, body, metrics)
    assert seen.emitted == {"cam0.image": 900, "cam0.video": 15, "asr0.text": 3}
    assert seen.ready == {"cam0": 0, "asr0": 4}
    assert seen.started == {"asr0": 310}
    assert seen.latency == {"asr0": (310, 1.5)}
    assert seen.losses == {"cam0/video/jpeg": 2}
    assert seen.transcripts == 7


def test_a_stack_goes_to_its_innermost_named_area() -> None:
    run = "main (mediaflow/cli.py:1);Runner.run (mediaflow/engine/runner.py:9)"
    speech = run + ";SpeechNode.run (mediaflow/nodes/speech.py:3)"
    assert area_of(speech) == "speech recognition (pocketsphinx)"
    save = "_emit (connectors/_emit.py:5);save_artifact (mediaflow/store/artifacts.py:80)"
    assert area_of(save) == "store: hash, write, fsync"
    assert area_of("encode (connectors/_jpeg.py:40)") == "JPEG encode (libjpeg-turbo)"
    assert area_of(run) == "engine: runner, reducer, journal"
    assert area_of("<module> (somewhere.py:1)") == OTHER


def test_exact_thread_cpu_goes_to_the_thread_s_job_or_its_samples_areas() -> None:
    raw = (
        "thread (10): MainThread;run (mediaflow/engine/runner.py:2) 30\n"
        "thread (10): MainThread;save (mediaflow/store/artifacts.py:9) 10\n"
        "thread (11): jpeg lavfi:testsrc2;encode (connectors/_jpeg.py:40) 5\n"
        "thread (12): uvloop_0;_worker (x.py:1);mux (mediaflow/nodes/recorder_mux.py:3) 2\n"
    )
    samples = parse_raw(raw)
    assert samples.names == {10: "MainThread", 11: "jpeg lavfi:testsrc2", 12: "uvloop_0"}
    before = {10: 5.0, 11: 1.0, 12: 0.0, 13: 2.0}
    after = {10: 7.0, 11: 1.5, 12: 0.5, 13: 3.0, 14: 0.5}  # 14: born in the window
    profile = attribute(window_cpu(before, after), samples, seconds=2.0, process_cores=2.5)
    assert profile.cores == {
        "engine: runner, reducer, journal": 0.75,  # the loop's 1 core, 3 samples in 4
        "store: hash, write, fsync": 0.25,
        "JPEG encode (libjpeg-turbo)": 0.25,  # its exact CPU, whatever it was sampled doing
        "recorder: clip mux": 0.25,
        NATIVE: 1.0,  # 13 and 14: never a Python stack; 0.25 from threads that ended
    }
    assert profile.total == 2.5


def test_one_small_rung_runs_and_is_measured(tmp_path: Path) -> None:
    flow = ScaleFlow(cameras=1, microphones=1, size="320x180", rate=10, fps=5.0)
    result = run_rung(flow, warmup_s=4.0, window_s=4.0, gc=GcEnv(64 << 20), workdir=tmp_path)
    assert result.failure is None, result.failure
    assert result.exit_code == 0
    names = [check.name for check in result.checks]
    assert names == [
        "sources in real time",
        "nothing lost at capture",
        "consumers keep up",
        "emit -> start latency",
        "backlog at the end",
        "speech heard",
        "no errors logged",
    ]
    by_name = {check.name: check for check in result.checks}
    assert by_name["no errors logged"].ok, by_name["no errors logged"].detail
    assert "of nominal" in by_name["sources in real time"].detail
    assert result.cores > 0 and result.rss > 0
