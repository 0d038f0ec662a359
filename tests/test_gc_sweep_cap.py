"""``sweep_artifacts`` under a disk cap (``max_bytes``): what it evicts, in which
order, and what it never takes; dry runs, and the lock that keeps one sweep per
data directory.

The store runs on a fake clock (started at the real time, so the queue's and the
run records' real timestamps compare with it); a sweep is told its ``now``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from mediaflow.engine.state_store import StateStore
from mediaflow.eventloop import run_blocking
from mediaflow.gc import SweepBusy
from mediaflow.gc.gcdb import BATCH
from mediaflow.gc.sweep import sweep_artifacts
from mediaflow.store.locks import exclusive_or_busy, try_share
from tests.gc_helpers import GRACE_S, GcEnv, owner_here, settings
from tests.gc_sweep_helpers import (
    KB,
    blob,
    env_fixture,  # noqa: F401 - the env fixture
    save_in_turn,
    state_fixture,  # noqa: F401 - the state fixture
)

# -- the disk cap ------------------------------------------------------------------------


async def test_the_cap_evicts_recordings_oldest_kept_first(env: GcEnv) -> None:
    clips = [await env.save(blob(f"clip {i}")) for i in range(4)]
    # Kept in another order than saved: the cap goes by when a recording was kept.
    for clip in (clips[2], clips[0], clips[3], clips[1]):
        env.store.keep("run-1", clip.digest)
        env.clock.advance(1)

    report = await env.sweep(max_bytes=2 * KB)

    assert env.evictions() == [(clips[2].digest, "cap"), (clips[0].digest, "cap")]
    assert [env.present(c) for c in clips] == [False, True, False, True]
    assert (report.evicted, report.evicted_bytes, report.deleted) == (2, 2 * KB, 0)
    assert (report.stored_bytes, report.over_cap) == (2 * KB, False)
    assert env.store.totals().kept_count == 2


async def test_the_cap_takes_recordings_then_unreferenced_artifacts_in_grace(
    env: GcEnv,
) -> None:
    loose = await save_in_turn(env, [f"frame {i}" for i in range(3)])
    clip = await env.save(blob("clip"))
    env.store.keep("run-1", clip.digest)
    env.clock.advance(1)  # all of it well inside the grace

    report = await env.sweep(max_bytes=2 * KB)

    assert env.evictions() == [(clip.digest, "cap"), (loose[0].digest, "cap")]
    assert [env.present(r) for r in loose] == [False, True, True]
    assert (report.evicted, report.stored_bytes) == (2, 2 * KB)


async def test_the_cap_never_takes_a_live_message_or_a_hold(env: GcEnv) -> None:
    queued = await env.save(blob("queued frame"))
    await env.emit(queued)
    held = await env.save(blob("segment the recorder still muxes"))
    env.store.keep("rec-1", held.digest, kind="hold")
    clip = await env.save(blob("clip, kept and held"))
    env.store.keep("rec-1", clip.digest, kind="hold")
    env.store.keep("run-1", clip.digest)
    loose = await env.save(blob("loose"))
    env.clock.advance(1)

    report = await env.sweep(max_bytes=1)

    assert env.gone(loose)
    assert all(env.present(r) for r in (queued, held, clip))
    assert env.keeps(clip) == {("rec-1", "hold"), ("run-1", "recording")}
    assert report.over_cap and report.evicted == 1
    assert env.events[-1] == (
        "store_over_cap",
        {"stored_bytes": 3 * KB, "max_bytes": 1, "live_bytes": 3 * KB},
    )


async def test_under_the_cap_nothing_in_grace_is_evicted(env: GcEnv) -> None:
    refs = [await env.save(blob(f"frame {i}")) for i in range(3)]
    env.clock.advance(1)

    report = await env.sweep(max_bytes=3 * KB)

    assert all(env.present(r) for r in refs)
    assert (report.evicted, report.over_cap) == (0, False)
    assert env.events == []


async def test_the_cap_spares_what_an_open_run_may_still_emit(
    env: GcEnv, state: StateStore
) -> None:
    old = await env.save(blob("before the horizon"))
    horizon = env.clock.advance(5)
    new = await env.save(blob("after the horizon"))
    state.start_run("run-7", "cams", owner_here())
    state.heartbeat("run-7", horizon=horizon)
    env.clock.advance(1)

    report = await env.sweep(max_bytes=1)

    assert env.gone(old) and env.present(new)
    assert report.over_cap


async def test_a_cap_only_pass_frees_just_what_the_cap_needs(env: GcEnv) -> None:
    old = await save_in_turn(env, [f"frame {i}" for i in range(3)])
    env.clock.advance(GRACE_S + 1)

    report = await env.sweep(max_bytes=2 * KB, cap_only=True)

    assert [env.present(r) for r in old] == [False, True, True]
    assert (report.deleted, report.evicted) == (0, 1)


async def test_the_cap_passes_over_an_artifact_being_sent_for_the_next_one(
    env: GcEnv,
) -> None:
    refs = await save_in_turn(env, [f"clip {i}" for i in range(3)])
    with open(env.path(refs[0]), "rb") as sending:
        assert try_share(sending.fileno())

        report = await env.sweep(max_bytes=2 * KB)

    assert [env.present(r) for r in refs] == [True, False, True]
    assert (report.skipped_sending, report.evicted, report.over_cap) == (1, 1, False)


# -- dry runs, the lock ------------------------------------------------------------------


async def test_a_dry_run_changes_nothing_and_reports_what_the_sweep_then_does(
    env: GcEnv,
) -> None:
    old = [await env.save(blob(f"old frame {i}")) for i in range(3)]
    await env.emit(old[1])
    clip = await env.save(blob("expired clip"))
    env.store.keep("run-1", clip.digest, expires_at=env.clock() + 1)
    env.clock.advance(GRACE_S + 10)
    kept = await env.save(blob("kept clip"))
    env.store.keep("run-1", kept.digest)
    recent = await save_in_turn(env, [f"new frame {i}" for i in range(3)])
    stored = env.store.totals()
    counters = env.store.gc_counters()
    cap = 3 * KB  # after collecting: 5 KB (1 live, the kept clip, 3 recent): 2 KB to evict

    dry = await env.sweep(dry_run=True, max_bytes=cap)

    assert env.store.totals() == stored and env.store.gc_counters() == counters
    assert all(env.present(r) for r in [*old, clip, kept, *recent])
    assert env.store.is_kept(kept.digest)
    dry_events = list(env.events)
    env.events.clear()

    real = await env.sweep(max_bytes=cap)

    assert (dry.dry_run, real.dry_run) == (True, False)
    assert (dry.deleted, dry.freed_bytes) == (real.deleted, real.freed_bytes) == (3, 5 * KB)
    assert (dry.evicted, dry.evicted_bytes) == (real.evicted, real.evicted_bytes) == (2, 2 * KB)
    assert dry_events == env.events
    assert env.gone(kept) and env.gone(recent[0]) and env.present(recent[1])
    assert env.store.totals().bytes == cap


async def test_a_second_sweep_of_the_directory_is_refused(env: GcEnv) -> None:
    ref = await env.save(blob("frame"))
    env.clock.advance(GRACE_S + 1)

    with exclusive_or_busy(env.data_dir / "gc.lock"):
        with pytest.raises(SweepBusy, match=f"another sweep is running on {env.data_dir}"):
            await env.sweep()
        assert env.present(ref)
        dry = await env.sweep(dry_run=True)  # a dry run changes nothing: it takes no lock
        assert dry.deleted == 1

    assert (await env.sweep()).deleted == 1


# -- cancelled mid-step --------------------------------------------------------------


async def test_a_cancelled_blocking_step_is_waited_for_and_told_to_stop() -> None:
    """A cancelled caller does not leave its thread behind: whatever it does next
    (close the database the step is using) runs after the step."""
    started, release, stop = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def step() -> None:
        started.set()
        release.wait(10)
        seen.append(stop.is_set())

    task = asyncio.create_task(run_blocking(step, stop=stop))
    await asyncio.to_thread(started.wait, 10)
    task.cancel()
    for _ in range(20):
        await asyncio.sleep(0.01)
    assert not task.done() and stop.is_set()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [True]


async def test_a_sweep_cancelled_mid_cap_stops_between_batches(env: GcEnv) -> None:
    refs = await save_in_turn(env, [f"b{i}" for i in range(3 * BATCH)])
    loop = asyncio.get_running_loop()
    first, go_on = asyncio.Event(), threading.Event()

    def sink(event_type: str, data: Mapping[str, Any]) -> None:
        if not first.is_set():
            loop.call_soon_threadsafe(first.set)
            go_on.wait(10)  # the first eviction holds its batch until the cancel is in

    sweeping = asyncio.create_task(
        sweep_artifacts(
            env.data_dir, env.queue, store=env.store, settings=settings(max_bytes=KB),
            cap_only=True, now=env.clock(), events=sink,
        )
    )  # fmt: skip
    try:
        await first.wait()
        sweeping.cancel()
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert not sweeping.done()  # it waits for the batch in its thread
    finally:
        go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await sweeping
    left = [ref for ref in refs if env.present(ref)]
    assert len(left) == 2 * BATCH  # the first batch went, then it stopped
    report = await env.sweep(max_bytes=KB)  # the store and its database are fine
    assert report.evicted == 2 * BATCH - 1
