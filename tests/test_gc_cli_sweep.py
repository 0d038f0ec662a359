"""``mediaflow gc`` as a user runs it on a real data directory (store, SQLite queue,
run records), through its ``main()``: what a sweep and a dry run report, the cap,
exit codes and one-line errors, and the progress line.

Forgetting a flow: ``tests/test_gc_cli_forget.py``; the periodic sweep of the
long-running commands: ``tests/test_gc_cli_periodic.py``.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from mediaflow import cli
from mediaflow.cli import gc as cli_gc
from mediaflow.engine.state_store import StateStore
from mediaflow.gc import SweepProgress
from mediaflow.store import ArtifactStore
from mediaflow.store.locks import exclusive_or_busy
from tests.gc_cli_helpers import (
    HOUR_S,
    emission,
    enqueue,
    gc,
    gc_defaults_fixture,  # noqa: F401 - the gc_defaults fixture (autouse)
    present,
    save_old,
)
from tests.gc_helpers import FakeClock, owner_here


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
        ("MEDIAFLOW_QUEUE", "amqp://127.0.0.1:1/0", "MEDIAFLOW_QUEUE='amqp://127.0.0.1:1/0'"),
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
    line = cli_gc.sweep_progress(tty, enabled=True, every_s=1.0, clock=clock)
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
    plain = cli_gc.sweep_progress(log, enabled=True, every_s=1.0, clock=clock)
    clock.advance(1.0)
    plain(SweepProgress("live", 5, 0))
    plain.finish()
    assert (
        log.getvalue() == "mediaflow gc: reading live references: 5 done, 0 B freed so far (1 s)\n"
    )
    quiet = io.StringIO()
    off = cli_gc.sweep_progress(quiet, enabled=False, clock=clock)
    clock.advance(5.0)
    off(SweepProgress("live", 5, 0))
    off.finish()
    assert quiet.getvalue() == ""
