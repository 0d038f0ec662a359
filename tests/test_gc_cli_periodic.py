"""The periodic sweep of the long-running commands (``run``, ``serve``, ``demo``) and
its cap watcher, on a real data directory; the commands run in a subprocess.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mediaflow.engine.events import EventBus
from mediaflow.gc import GcSettings, start_periodic
from tests.gc_cli_helpers import (
    HOUR_S,
    gc_defaults_fixture,  # noqa: F401 - the gc_defaults fixture (autouse)
    present,
    save_old,
)
from tests.test_cli import mediaflow

# -- the periodic sweep -----------------------------------------------------------------


async def test_no_periodic_sweep_when_both_timers_are_off(tmp_path: Path) -> None:
    off = GcSettings(interval_s=0.0, max_bytes=None)
    assert start_periodic(tmp_path, None, EventBus(), off) is None


async def test_the_cap_watcher_runs_with_periodic_sweeps_off(tmp_path: Path) -> None:
    """``ARTIFACT_GC_INTERVAL_S=0`` with a cap: no full sweeps, but the cap holds."""
    old = save_old(tmp_path, b"o" * 3000, age_s=10 * HOUR_S)
    newer = save_old(tmp_path, b"n" * 3000, age_s=5 * HOUR_S)
    bus = EventBus()
    settings = GcSettings(interval_s=0.0, max_bytes=4000, cap_check_s=0.05)
    sweeping = start_periodic(tmp_path, None, bus, settings)
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
