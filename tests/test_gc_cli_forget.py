"""``mediaflow gc --forget-flow``: a flow's records dropped and its artifacts swept,
refused while items wait or a run is open; on a real data directory, through the
CLI's ``main()``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mediaflow.engine.state_store import StateStore
from mediaflow.media import MediaRef
from mediaflow.queue import SqliteQueue
from tests.gc_cli_helpers import (
    emission,
    enqueue,
    gc,
    gc_defaults_fixture,  # noqa: F401 - the gc_defaults fixture (autouse)
    present,
    save_old,
)
from tests.gc_helpers import owner_dead, owner_here, run_async

# -- forgetting a flow ------------------------------------------------------------------


def dead_letter(data_dir: Path, flow: str, ref: MediaRef) -> None:
    async def put() -> None:
        queue = SqliteQueue.in_dir(data_dir)
        try:
            [item] = await queue.commit([emission(flow, ref)], claim_for="worker")
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
