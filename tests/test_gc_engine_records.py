"""What the engine keeps for garbage collection, tested directly: run records with
their horizons (started, heartbeated, adopted, pruned, forgotten) and the pins
behind a runner's horizon.

The same facts in running flows: ``tests/test_gc_engine_flows.py``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from mediaflow.engine.pins import STALE_PIN_S, Pins
from mediaflow.engine.state_store import StateStore

# -- run records -----------------------------------------------------------------


@pytest.fixture
def state(tmp_path: Path) -> Iterator[StateStore]:
    store = StateStore(tmp_path)
    yield store
    store.close()


def test_a_run_starts_with_its_start_as_horizon(state: StateStore) -> None:
    record = state.start_run("r1", "cam", "host:1:x")
    assert record.horizon == record.started_at
    assert state.last_run("cam") == record


def test_a_heartbeat_writes_the_horizon_given_or_now(state: StateStore) -> None:
    state.start_run("r1", "cam", "host:1:x")
    before = time.time()
    state.heartbeat("r1", horizon=before - 30)
    record = state.last_run("cam")
    assert record is not None and record.horizon == before - 30
    assert record.heartbeat_at >= before

    state.heartbeat("r1")
    record = state.last_run("cam")
    assert record is not None and record.horizon == record.heartbeat_at >= before


def test_adopting_a_crashed_run_starts_its_horizon_again(state: StateStore) -> None:
    state.start_run("r1", "cam", "host:1:x")
    state.heartbeat("r1", horizon=1.0)
    before = time.time()
    state.adopt_run("r1", "host:2:y")
    record = state.last_run("cam")
    assert record is not None and record.owner == "host:2:y"
    assert record.horizon is not None and record.horizon >= before


def test_open_runs_are_those_not_ended(state: StateStore) -> None:
    state.start_run("a", "cam", "o")
    state.start_run("b", "mic", "o")
    state.start_run("c", "cam", "o")
    state.end_run("a", "stopped")

    assert [r.run_id for r in state.open_runs()] == ["b", "c"]
    assert all(not r.ended for r in state.open_runs())


def test_an_older_file_gains_the_horizon_column(tmp_path: Path) -> None:
    old = sqlite3.connect(tmp_path / "state.sqlite3")
    old.executescript(
        """
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY, flow TEXT NOT NULL, owner TEXT NOT NULL,
            started_at REAL NOT NULL, heartbeat_at REAL NOT NULL,
            ended_at REAL, outcome TEXT
        );
        INSERT INTO runs VALUES ('old', 'cam', 'o', 1.0, 2.0, NULL, NULL);
        """
    )
    old.close()

    state = StateStore(tmp_path)
    again = StateStore(tmp_path)  # a second opener finds the column there
    try:
        record = state.last_run("cam")
        assert record is not None and record.run_id == "old" and record.horizon is None
        state.heartbeat("old", horizon=5.0)
        assert [r.horizon for r in again.open_runs()] == [5.0]
    finally:
        state.close()
        again.close()


def test_the_state_file_limits_its_wal(state: StateStore) -> None:
    limit = state._db.execute("PRAGMA journal_size_limit").fetchone()[0]
    assert 0 < limit <= 16 * 1024 * 1024


def _runs(state: StateStore, flow: str, ends: Sequence[float | None]) -> None:
    """Runs of ``flow`` started in this order, ended at ``ends`` (None: open)."""
    for index, ended in enumerate(ends):
        run_id = f"{flow}{index}"
        state.start_run(run_id, flow, "o")
        if ended is not None:
            state._db.execute(
                "UPDATE runs SET started_at=?, ended_at=? WHERE run_id=?",
                (float(index), ended, run_id),
            )
        else:
            state._db.execute("UPDATE runs SET started_at=? WHERE run_id=?", (float(index), run_id))
    state._db.commit()


@pytest.mark.parametrize(
    ("ends", "ended_before", "keep", "left"),
    [
        # all ended long ago: the newest `keep` stay
        ([1, 2, 3, 4, 5], 100, 2, ["f3", "f4"]),
        # only those ended before the cutoff go
        ([1, 2, 30, 40, 50], 10, 1, ["f2", "f3", "f4"]),
        # an open run is never deleted, and counts among the newest
        ([None, 2, 3, 4, None], 100, 2, ["f0", "f3", "f4"]),
        ([1, 2, 3], 100, 5, ["f0", "f1", "f2"]),
    ],
)
def test_prune_runs(
    state: StateStore,
    ends: list[float | None],
    ended_before: float,
    keep: int,
    left: list[str],
) -> None:
    _runs(state, "f", ends)
    _runs(state, "g", [1, 2, 3])

    pruned = state.prune_runs(ended_before=ended_before, keep_per_flow=keep)

    remaining = [r for (r,) in state._db.execute("SELECT run_id FROM runs ORDER BY run_id")]
    assert [r for r in remaining if r.startswith("f")] == left
    assert pruned == len(ends) - len(left) + (3 - sum(r.startswith("g") for r in remaining))
    assert state.last_run("f") is not None


def test_prune_runs_keeps_at_least_the_newest(state: StateStore) -> None:
    with pytest.raises(ValueError, match="keep_per_flow"):
        state.prune_runs(ended_before=time.time(), keep_per_flow=0)


def test_forget_flow_deletes_its_ended_runs_only(state: StateStore) -> None:
    _runs(state, "f", [1, 2, None])
    _runs(state, "g", [1])

    assert state.forget_flow("f") == 2
    assert [r.run_id for r in state.open_runs()] == ["f2"]
    assert state.last_run("g") is not None


# -- pins ------------------------------------------------------------------------


def test_pins_horizon_is_the_earliest_save_still_held() -> None:
    pins = Pins()
    first: dict[str, Any] = {}
    second: dict[str, Any] = {}
    assert pins.horizon(100.0) == 100.0

    pins.take(first, "d1", 10.0, 11.0)
    pins.take(first, "d2", 20.0, 21.0)
    pins.take(second, "d1", 5.0, 30.0)  # the same bytes saved by another run, earlier
    pins.take(first, "d1", 1.0, 40.0)  # a run pins a digest once
    assert pins.horizon(100.0) == 5.0

    pins.release_all(second)
    assert pins.horizon(100.0) == 5.0  # d1 is still held by the first run
    pins.release(first, "d1")
    assert pins.horizon(100.0) == 20.0
    pins.release(first, "d1")  # twice is harmless
    pins.release_all(first)
    assert pins.horizon(100.0) == 100.0
    assert len(pins) == 0


def test_a_running_save_counts_from_its_start() -> None:
    pins = Pins()
    held: dict[str, Any] = {}
    token = pins.saving(10.0)
    assert pins.horizon(100.0) == 10.0  # the store may have recorded it already
    assert pins.horizon(10.0 + STALE_PIN_S * 2) == 10.0  # and it is never stale
    pins.saved(token)
    assert pins.horizon(100.0) == 100.0
    pins.take(held, "d", 10.0, 50.0)
    assert pins.horizon(100.0) == 10.0


def test_a_stale_pin_is_dropped_and_never_releases_a_newer_one() -> None:
    pins = Pins()
    old_run: dict[str, Any] = {}
    new_run: dict[str, Any] = {}
    pins.take(old_run, "d", 0.0, 0.0)
    later = STALE_PIN_S + 1
    assert pins.horizon(STALE_PIN_S - 1) == 0.0  # held for under the limit: it stays

    assert pins.horizon(later) == later  # held for over an hour: dropped, logged
    pins.take(new_run, "d", STALE_PIN_S, STALE_PIN_S)
    pins.release_all(old_run)  # the stale holder lets go: the new pin stays
    assert pins.horizon(later) == STALE_PIN_S


def test_a_long_save_is_pinned_from_when_it_returned() -> None:
    pins = Pins()
    held: dict[str, Any] = {}
    pins.take(held, "d", 0.0, STALE_PIN_S * 3)  # a save that streamed for hours
    assert pins.horizon(STALE_PIN_S * 3 + 1) == 0.0
