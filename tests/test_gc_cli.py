"""``mediaflow gc`` as a user runs it, and the periodic sweep of ``run``: a real data
directory (store, SQLite queue, run records), the CLI through its ``main()`` or a
subprocess."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from mediaflow import cli, cli_gc
from mediaflow.engine.events import EventBus
from mediaflow.engine.state_store import StateStore
from mediaflow.gc import GcSettings, SweepProgress
from mediaflow.media import MediaRef
from mediaflow.queue import NewItem, SqliteQueue, StreamKey
from mediaflow.store import ArtifactStore
from mediaflow.store.locks import exclusive_or_busy
from tests.gc_helpers import FakeClock, owner_dead, owner_here, ref_payload, run_async
from tests.test_cli import mediaflow

HOUR_S = 3600.0
GC_VARIABLES = ("ARTIFACT_GC_INTERVAL_S", "ARTIFACT_GC_GRACE_S", "ARTIFACT_MAX_BYTES",
                "ARTIFACT_CAP_CHECK_S", "MEDIAFLOW_QUEUE")  # fmt: skip


@pytest.fixture(autouse=True)
def _defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults, whatever the environment running the tests sets."""
    for name in GC_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def save_old(data_dir: Path, data: bytes, *, age_s: float = 2 * HOUR_S) -> MediaRef:
    """Save ``data`` as if ``age_s`` ago (past the default grace of an hour)."""
    store = ArtifactStore(data_dir, clock=FakeClock(time.time() - age_s))
    try:
        return store.save_sync(data, "image/jpeg")
    finally:
        store.close()


def enqueue(data_dir: Path, *items: NewItem, claim_for: str | None = None) -> None:
    async def put() -> None:
        queue = SqliteQueue.in_dir(data_dir)
        try:
            await queue.enqueue(list(items), claim_for=claim_for)
        finally:
            await queue.close()

    run_async(put())


def emission(flow: str, ref: MediaRef) -> NewItem:
    return NewItem(StreamKey(flow, "viewer"), "emission", ref_payload(ref))


def present(data_dir: Path, ref: MediaRef) -> bool:
    store = ArtifactStore(data_dir)
    try:
        return store.exists(ref)
    finally:
        store.close()


def gc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["gc", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def data(tmp_path: Path) -> dict[str, Any]:
    """A data directory with one artifact of each fate: garbage (old, unreferenced),
    one a queued item references, one kept as a recording, one still in its grace."""
    data_dir = tmp_path / "data"
    garbage = save_old(data_dir, b"garbage" * 100)
    queued = save_old(data_dir, b"queued" * 100)
    kept = save_old(data_dir, b"kept" * 100)
    fresh = save_old(data_dir, b"fresh" * 100, age_s=60)
    enqueue(data_dir, emission("cams", queued))
    store = ArtifactStore(data_dir)
    store.keep("run-1", kept.digest)
    store.close()
    return {"dir": data_dir, "garbage": garbage, "queued": queued, "kept": kept, "fresh": fresh}


def test_a_dry_run_says_what_would_go_and_deletes_nothing(
    data: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = gc(capsys, "--dry-run", "--data", str(data["dir"]))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("would delete 1 artifact, freeing 700 B, in ")
    assert "1 referenced by live messages" in lines[0]
    assert "  nothing referenced them: 1" in lines
    assert "  stored: 4 artifacts, 2.2 KB" in lines
    for name in ("garbage", "queued", "kept", "fresh"):
        assert present(data["dir"], data[name]), name


def test_a_sweep_deletes_exactly_the_unreferenced_then_finds_nothing(
    data: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = gc(capsys, "--data", str(data["dir"]))
    assert code == 0, err
    assert out.startswith("deleted 1 artifact, freed 700 B, in ")
    assert "  stored: 3 artifacts, 1.5 KB" in out.splitlines()
    assert not present(data["dir"], data["garbage"])
    for name in ("queued", "kept", "fresh"):
        assert present(data["dir"], data[name]), name

    code, out, err = gc(capsys, "--json", "--data", str(data["dir"]))
    assert code == 0, err
    report = json.loads(out)  # only the JSON on stdout
    assert report["deleted"] == 0 and report["freed_bytes"] == 0
    assert report["dry_run"] is False and report["stored_count"] == 3
    assert report["live_digests"] == 1 and report["pinned_by"] == []


def test_the_json_report_of_a_dry_run(
    data: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = gc(capsys, "--dry-run", "--json", "--data", str(data["dir"]))
    assert code == 0
    report = json.loads(out)
    assert report["dry_run"] is True and report["deleted"] == 1 and report["freed_bytes"] == 700
    assert {"cutoff", "duration_s", "evicted", "temp_removed", "over_cap"} <= set(report)


def test_the_cap_evicts_and_the_summary_says_so(
    data: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 2.2 KB stored. The sweep collects the garbage (700 B); the cap then evicts the
    # recording (400 B), then the fresh artifact (the cap ignores the grace: 500 B);
    # the queued one (600 B) is a live message's, so the store stays over.
    monkeypatch.setenv("ARTIFACT_MAX_BYTES", "500")
    code, out, err = gc(capsys, "--data", str(data["dir"]))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("deleted 3 artifacts, freed 1.6 KB")
    assert "  nothing referenced them: 1" in lines
    assert "  evicted under the cap: 2 (900 B)" in lines
    assert "  expired keeps: 1" not in lines
    assert "  stored: 1 artifact, 600 B (cap 500 B)" in lines
    assert "  still over the cap: what is left is held by live references" in lines
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["store over cap: 600 B of 500 B, 600 B held by live references"]
    for name in ("garbage", "kept", "fresh"):
        assert not present(data["dir"], data[name]), name
    assert present(data["dir"], data["queued"])


def test_the_runs_that_hold_the_cutoff_back_are_named(
    data: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    state = StateStore(data["dir"])
    state.start_run("run-live", "cams", owner_here())
    state.heartbeat("run-live", horizon=time.time() - 3 * HOUR_S)  # before the garbage
    state.close()
    code, out, err = gc(capsys, "--data", str(data["dir"]))
    assert code == 0, err
    assert out.startswith("deleted 0 artifacts")
    assert out.splitlines()[-1].endswith(": run-live")
    assert present(data["dir"], data["garbage"])


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        ("ARTIFACT_MAX_BYTES", "banana", "ARTIFACT_MAX_BYTES: 'banana' is not a size"),
        ("ARTIFACT_GC_GRACE_S", "-1", "ARTIFACT_GC_GRACE_S='-1' must be at least"),
        ("MEDIAFLOW_QUEUE", "redis://127.0.0.1:1/0", "MEDIAFLOW_QUEUE='redis://127.0.0.1:1/0'"),
    ],
)
def test_a_bad_setting_exits_2_with_one_line(
    variable: str,
    value: str,
    fragment: str,
    data: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(variable, value)
    code, out, err = gc(capsys, "--data", str(data["dir"]))
    assert code == 2 and out == ""
    assert err.startswith(f"mediaflow: {fragment}") and err.count("\n") == 1
    assert present(data["dir"], data["garbage"])


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["gc", "--frobnicate"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err
    code, _, err = gc(capsys, "--dry-run", "--forget-flow", "x", "--data", str(tmp_path))
    assert code == 2 and err == "mediaflow: --forget-flow cannot be combined with --dry-run\n"


def test_another_sweep_running_exits_1(
    data: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # The lock another process's sweep takes: an flock on its own descriptor.
    with exclusive_or_busy(data["dir"] / "gc.lock"):
        code, out, err = gc(capsys, "--data", str(data["dir"]))
    assert code == 1 and out == ""
    assert err == f"mediaflow: another sweep is running on {data['dir']}\n"
    assert present(data["dir"], data["garbage"])


def test_a_missing_data_directory_exits_1_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = gc(capsys, "--data", str(tmp_path / "typo"))
    assert code == 1 and err == f"mediaflow: no data directory at {tmp_path / 'typo'}\n"
    assert not (tmp_path / "typo").exists()


def test_a_broken_store_exits_1_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "store.sqlite3").write_bytes(b"this is not a database" * 100)
    code, _, err = gc(capsys, "--data", str(tmp_path))
    assert code == 1 and err.startswith(f"mediaflow: gc failed on {tmp_path}: ")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_progress_lines_with_v(
    data: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_gc, "PROGRESS_EVERY_S", 0.0)  # every report the sweep gives
    code, out, err = gc(capsys, "-v", "--data", str(data["dir"]))
    assert code == 0
    progress = [line for line in err.splitlines() if line.startswith("mediaflow gc: ")]
    assert progress and progress[0].startswith("mediaflow gc: reading live references: 1 done")
    assert not any(line.startswith("mediaflow gc") for line in out.splitlines())
    # Without -v, and not on a terminal: nothing but the summary.
    code, out, err = gc(capsys, "--data", str(data["dir"]))
    assert code == 0 and "mediaflow gc: " not in err


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_is_throttled_and_rewrites_itself_on_a_terminal() -> None:
    clock = FakeClock(100.0)
    tty = Tty()
    line = cli_gc.ProgressLine(tty, enabled=True, every_s=1.0, clock=clock)
    line(SweepProgress("collect", 10, 0))  # too soon after the start
    clock.advance(1.0)
    line(SweepProgress("collect", 2000, 3_500_000))
    clock.advance(0.5)
    line(SweepProgress("collect", 3000, 4_000_000))  # within the second: skipped
    clock.advance(0.6)
    line(SweepProgress("cap", 12, 5_000_000))
    line.finish()
    assert tty.getvalue() == (
        "\rmediaflow gc: collecting: 2,000 done, 3.5 MB freed so far (1 s)\x1b[K"
        "\rmediaflow gc: evicting under the cap: 12 done, 5.0 MB freed so far (2 s)\x1b[K\n"
    )
    log = io.StringIO()
    plain = cli_gc.ProgressLine(log, enabled=True, every_s=1.0, clock=clock)
    clock.advance(1.0)
    plain(SweepProgress("live", 5, 0))
    plain.finish()
    assert (
        log.getvalue() == "mediaflow gc: reading live references: 5 done, 0 B freed so far (1 s)\n"
    )
    quiet = io.StringIO()
    off = cli_gc.ProgressLine(quiet, enabled=False, clock=clock)
    clock.advance(5.0)
    off(SweepProgress("live", 5, 0))
    off.finish()
    assert quiet.getvalue() == ""


# -- forgetting a flow ------------------------------------------------------------------


def dead_letter(data_dir: Path, flow: str, ref: MediaRef) -> None:
    async def put() -> None:
        queue = SqliteQueue.in_dir(data_dir)
        try:
            [item] = await queue.enqueue([emission(flow, ref)], claim_for="worker")
            await queue.dead_letter(item, "boom")
        finally:
            await queue.close()

    run_async(put())


def put_latest(data_dir: Path, flow: str, ref: MediaRef) -> None:
    async def put() -> None:
        queue = SqliteQueue.in_dir(data_dir)
        try:
            await queue.put_latest({(flow, "cam", "image"): {"$ref": ref.to_json()}})
        finally:
            await queue.close()

    run_async(put())


def ended_run(data_dir: Path, flow: str, run_id: str) -> None:
    state = StateStore(data_dir)
    state.start_run(run_id, flow, owner_here())
    state.end_run(run_id, "stopped")
    state.close()


def test_forget_flow_drops_its_records_and_the_sweep_takes_its_artifacts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    latest = save_old(data_dir, b"old flow's latest frame")
    dead = save_old(data_dir, b"old flow's dead letter")
    other = save_old(data_dir, b"another flow's latest frame")
    put_latest(data_dir, "old", latest)
    dead_letter(data_dir, "old", dead)
    put_latest(data_dir, "other", other)
    ended_run(data_dir, "old", "run-old")
    ended_run(data_dir, "other", "run-other")

    code, out, err = gc(capsys, "--forget-flow", "old", "--data", str(data_dir))
    assert code == 0, err
    first, second = out.splitlines()[:2]
    assert first == "forgot flow 'old': 1 latest, 1 dead letters, 1 runs"
    assert second.startswith("deleted 2 artifacts")
    assert not present(data_dir, latest) and not present(data_dir, dead)
    assert present(data_dir, other)
    state = StateStore(data_dir)
    assert state.last_run("old") is None and state.last_run("other") is not None
    state.close()

    code, out, _ = gc(capsys, "--forget-flow", "old", "--json", "--data", str(data_dir))
    assert code == 0
    report = json.loads(out)
    assert report["forgot_flow"] == {"flow": "old", "latest": 0, "dead_letters": 0, "runs": 0}


def test_forget_flow_is_refused_while_items_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    waiting = save_old(data_dir, b"still to be read")
    enqueue(data_dir, emission("old", waiting))
    put_latest(data_dir, "old", waiting)
    code, out, err = gc(capsys, "--forget-flow", "old", "--data", str(data_dir))
    assert code == 1 and out == ""
    assert err.startswith("mediaflow: cannot forget flow 'old': flow 'old' still has 1 item")
    assert err.count("\n") == 1
    assert present(data_dir, waiting)


@pytest.mark.parametrize(
    ("owner", "message"),
    [
        (owner_here, "mediaflow: flow 'old' is running (run run-open, owner "),
        (owner_dead, "mediaflow: flow 'old''s last run run-open did not end (its process died)"),
    ],
    ids=["running", "crashed"],
)
def test_forget_flow_is_refused_while_a_run_is_open(
    owner: Any, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    latest = save_old(data_dir, b"latest of a running flow")
    put_latest(data_dir, "old", latest)
    state = StateStore(data_dir)
    state.start_run("run-open", "old", owner())
    state.close()
    code, _, err = gc(capsys, "--forget-flow", "old", "--data", str(data_dir))
    assert code == 1 and err.startswith(message) and err.count("\n") == 1
    assert present(data_dir, latest)
    state = StateStore(data_dir)
    assert state.last_run("old") is not None
    state.close()


# -- the periodic sweep -----------------------------------------------------------------


async def test_no_periodic_sweep_when_both_timers_are_off(tmp_path: Path) -> None:
    off = GcSettings(interval_s=0.0, max_bytes=None)
    assert cli_gc.start_periodic(tmp_path, None, EventBus(), off) is None


async def test_the_cap_watcher_runs_with_periodic_sweeps_off(tmp_path: Path) -> None:
    """``ARTIFACT_GC_INTERVAL_S=0`` with a cap: no full sweeps, but the cap holds."""
    old = save_old(tmp_path, b"o" * 3000, age_s=10 * HOUR_S)
    newer = save_old(tmp_path, b"n" * 3000, age_s=5 * HOUR_S)
    bus = EventBus()
    settings = GcSettings(interval_s=0.0, max_bytes=4000, cap_check_s=0.05)
    sweeping = cli_gc.start_periodic(tmp_path, None, bus, settings)
    assert sweeping is not None
    try:
        evicted = bus.subscribe(types=frozenset({"artifact_evicted"}))
        event = await asyncio.wait_for(evicted.get(), 10)
        assert event is not None
        assert event.data == {"digest": old.digest, "bytes": 3000, "why": "cap"}
        assert "gc_swept" not in bus.counts  # no full sweep ran
    finally:
        await sweeping.stop()
    assert not present(tmp_path, old) and present(tmp_path, newer)


def test_run_sweeps_periodically(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    garbage = save_old(data_dir, b"left by an earlier run")
    flow = tmp_path / "ticks.toml"
    flow.write_text(
        '[flow]\nname = "ticks"\n'
        '[[node]]\nid = "src"\nuse = "tests.engine_nodes:Counter"\ncount = 1000000\n'
        "period_s = 0.01\n"
        '[[node]]\nid = "sink"\nuse = "tests.engine_nodes:Recorder"\n'
        'inputs = { chunk = "src.chunk" }\n'
    )
    result = mediaflow(
        "run", str(flow), "--for", "2", "--data", str(data_dir), "-v",
        env={"ARTIFACT_GC_INTERVAL_S": "0.3"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "gc: deleted 1 (" in result.stderr
    assert not present(data_dir, garbage)


@pytest.mark.parametrize("command", ["run", "serve", "demo"])
def test_a_bad_gc_setting_stops_the_long_running_commands_before_they_start(
    command: str, tmp_path: Path
) -> None:
    args = {
        "run": ["run", "samples/levels.toml", "--until-idle"],
        "serve": ["serve", "--port", "0"],
        "demo": ["demo", "--for", "1", "--port", "0"],
    }[command]
    result = mediaflow(*args, "--data", str(tmp_path), env={"ARTIFACT_MAX_BYTES": "banana"})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("mediaflow: ARTIFACT_MAX_BYTES: 'banana' is not a size"), lines
    assert "Traceback" not in result.stderr and "serving on" not in result.stderr
    assert not (tmp_path / "queue.sqlite3").exists()
