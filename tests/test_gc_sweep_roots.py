"""``sweep_artifacts`` on a real store and a real SQLite queue: what keeps an artifact
(its grace, the roots that reference it, the horizon of a run in flight), one
behaviour per test.

The store runs on a fake clock (started at the real time, so the queue's and the
run records' real timestamps compare with it); a sweep is told its ``now``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from mediaflow.engine.state_store import StateStore
from mediaflow.media import MediaRef
from tests.gc_helpers import GRACE_S, STREAM, GcEnv, owner_dead, owner_here
from tests.gc_sweep_helpers import (
    DAY_S,
    KB,
    blob,
    dead_letter,
    env_fixture,  # noqa: F401 - the env fixture
    state_fixture,  # noqa: F401 - the state fixture
)

# -- grace -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age_s", "collected"),
    [
        (0.0, False),
        (GRACE_S - 1, False),
        (GRACE_S, False),  # saved exactly at the cutoff: only older ones go
        (GRACE_S + 1, True),
        (30 * DAY_S, True),
    ],
)
async def test_an_unreferenced_artifact_goes_once_its_grace_is_over(
    env: GcEnv, age_s: float, collected: bool
) -> None:
    ref = await env.save(blob("frame"))
    env.clock.advance(age_s)

    report = await env.sweep()

    assert env.gone(ref) is collected and env.present(ref) is not collected
    assert (report.deleted, report.freed_bytes) == ((1, KB) if collected else (0, 0))
    assert report.cutoff == env.clock() - GRACE_S


async def test_saving_old_bytes_again_starts_their_grace_again(env: GcEnv) -> None:
    ref = await env.save(blob("silence"))
    env.clock.advance(GRACE_S + 10)
    assert await env.save(blob("silence")) == ref  # a still scene: the same bytes

    await env.sweep()
    assert env.present(ref)

    env.clock.advance(GRACE_S + 10)
    await env.sweep()
    assert env.gone(ref)


# -- roots -------------------------------------------------------------------------------

Root = Callable[[GcEnv, MediaRef], Awaitable[object]]


async def ready(env: GcEnv, ref: MediaRef) -> None:
    await env.emit(ref)


async def claimed(env: GcEnv, ref: MediaRef) -> None:
    await env.claim(ref)


async def parked(env: GcEnv, ref: MediaRef) -> None:
    await env.queue.park(STREAM.flow)
    await env.emit(ref)


async def latest(env: GcEnv, ref: MediaRef) -> None:
    await env.queue.put_latest({(STREAM.flow, "cam", "image"): {"$ref": ref.to_json()}})


async def recording(env: GcEnv, ref: MediaRef) -> None:
    env.store.keep("run-1", ref.digest)


async def recording_until_later(env: GcEnv, ref: MediaRef) -> None:
    env.store.keep("run-1", ref.digest, expires_at=env.clock() + 365 * DAY_S)


async def hold(env: GcEnv, ref: MediaRef) -> None:
    env.store.keep("run-1", ref.digest, kind="hold")


@pytest.mark.parametrize(
    "root",
    [
        ready,
        claimed,
        parked,
        dead_letter,
        latest,
        recording,
        recording_until_later,
        hold,
    ],
)
async def test_a_rooted_artifact_outlives_its_grace(env: GcEnv, root: Root) -> None:
    ref = await env.save(blob("rooted"))
    other = await env.save(blob("unrooted"))
    await root(env, ref)
    env.clock.advance(30 * DAY_S)

    report = await env.sweep()

    assert env.present(ref)
    assert env.gone(other)
    assert report.deleted == 1


async def acked(env: GcEnv, ref: MediaRef) -> None:
    item = await env.claim(ref)
    await env.queue.ack([item.entry_id])


async def released(env: GcEnv, ref: MediaRef) -> None:
    env.store.keep("run-1", ref.digest)
    env.store.keep("run-1", ref.digest, kind="hold")
    assert env.store.release("run-1") == 1  # one row per (run, digest): the kind is replaced


async def unkept(env: GcEnv, ref: MediaRef) -> None:
    env.store.keep("run-1", ref.digest, kind="hold")
    assert env.store.unkeep("run-1", ref.digest)


async def latest_replaced(env: GcEnv, ref: MediaRef) -> None:
    await latest(env, ref)
    await env.queue.put_latest({(STREAM.flow, "cam", "image"): {"$ref": None}})


@pytest.mark.parametrize("unroot", [acked, released, unkept, latest_replaced])
async def test_an_artifact_whose_root_went_is_collected(env: GcEnv, unroot: Root) -> None:
    ref = await env.save(blob("was rooted"))
    await unroot(env, ref)
    env.clock.advance(GRACE_S + 1)

    await env.sweep()

    assert env.gone(ref)


async def test_an_expired_recording_is_deleted_for_retention(env: GcEnv) -> None:
    clip = await env.save(blob("clip"))
    fresh = await env.save(blob("clip, still kept"))
    env.store.keep("run-1", clip.digest, expires_at=env.clock() + 10)
    env.store.keep("run-1", fresh.digest, expires_at=env.clock() + 30 * DAY_S)
    env.clock.advance(7 * DAY_S)

    report = await env.sweep()

    assert env.gone(clip) and not env.store.is_kept(clip.digest)
    assert env.present(fresh)
    assert report.keeps_expired == 1
    assert env.evictions() == [(clip.digest, "retention")]
    assert ("artifact_evicted", {"digest": clip.digest, "bytes": KB, "why": "retention"}) in (
        env.events
    )


async def test_an_expired_keep_within_grace_waits_for_the_grace(env: GcEnv) -> None:
    clip = await env.save(blob("clip"))
    env.store.keep("run-1", clip.digest, expires_at=env.clock() + 10)
    env.clock.advance(60)

    report = await env.sweep()

    # The expired keep stays with its artifact, so the sweep that takes it says why.
    assert env.present(clip) and report.keeps_expired == 0
    env.clock.advance(GRACE_S)
    report = await env.sweep()
    assert env.gone(clip) and report.keeps_expired == 1
    assert env.evictions() == [(clip.digest, "retention")]


# -- runs in flight ----------------------------------------------------------------------


async def test_an_open_run_holds_the_cutoff_at_its_horizon(env: GcEnv, state: StateStore) -> None:
    before = await env.save(blob("saved before the horizon"))
    horizon = env.clock.advance(5)
    after = await env.save(blob("saved after: the run may hold it, not yet emitted"))
    state.start_run("run-7", "cams", owner_here())
    state.heartbeat("run-7", horizon=horizon)
    env.clock.advance(30 * DAY_S)

    report = await env.sweep()

    assert (report.cutoff, report.pinned_by) == (horizon, ("run-7",))
    assert env.gone(before)
    assert env.present(after)

    state.end_run("run-7", "stopped")
    report = await env.sweep()
    assert report.pinned_by == ()
    assert env.gone(after)


async def test_an_open_run_whose_owner_died_pins_nothing(env: GcEnv, state: StateStore) -> None:
    ref = await env.save(blob("saved by a process that was killed"))
    state.start_run("run-8", "cams", owner_dead())
    state.heartbeat("run-8", horizon=env.clock() - 1)
    env.clock.advance(GRACE_S + 1)

    report = await env.sweep()

    assert report.pinned_by == ()
    assert report.cutoff == env.clock() - GRACE_S
    assert env.gone(ref)


async def test_a_horizon_inside_the_grace_changes_nothing(env: GcEnv, state: StateStore) -> None:
    state.start_run("run-9", "cams", owner_here())
    env.clock.advance(GRACE_S + 60)
    state.heartbeat("run-9", horizon=env.clock() - 10)

    report = await env.sweep()

    assert report.pinned_by == ()
    assert report.cutoff == env.clock() - GRACE_S
