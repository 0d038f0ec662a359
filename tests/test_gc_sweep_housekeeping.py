"""What else ``sweep_artifacts`` tidies on a real store and a real SQLite queue: files
being sent wait, stray files are adopted, stale temp files go, old dead letters and
run records are trimmed, counters add up, and an open reader still reads.

The store runs on a fake clock (started at the real time, so the queue's and the
run records' real timestamps compare with it); a sweep is told its ``now``.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from mediaflow.engine.state_store import StateStore
from mediaflow.media import MediaRef
from mediaflow.store.locks import try_share, unshare
from tests.gc_helpers import GRACE_S, GcEnv, digest_of, owner_dead, owner_here
from tests.gc_sweep_helpers import (
    DAY_S,
    blob,
    dead_letter,
    env_fixture,  # noqa: F401 - the env fixture
    state_fixture,  # noqa: F401 - the state fixture
)

# -- files being sent, strays and temp files ---------------------------------------------


async def test_an_artifact_being_sent_is_left_for_the_next_sweep(env: GcEnv) -> None:
    ref = await env.save(blob("clip a viewer is seeking in"))
    env.clock.advance(GRACE_S + 1)
    with open(env.path(ref), "rb") as sending:
        assert try_share(sending.fileno())  # what the server does while it sends

        report = await env.sweep()

        assert env.present(ref)
        assert (report.skipped_sending, report.deleted) == (1, 0)
        unshare(sending.fileno())

    report = await env.sweep()
    assert env.gone(ref)
    assert (report.skipped_sending, report.deleted) == (0, 1)


def write_stray(env: GcEnv, data: bytes, *, age_s: float = 0.0) -> str:
    """Place ``data`` in the fan-out directories without a row, as a crash leaves it."""
    digest = digest_of(data)
    path = env.path(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if age_s:
        at = env.clock() - age_s
        os.utime(path, (at, at))
    return digest


async def test_an_old_stray_file_is_adopted_and_collected(env: GcEnv) -> None:
    stray = write_stray(env, blob("crashed before its row"), age_s=GRACE_S + 60)

    report = await env.sweep()

    assert (report.orphans_adopted, report.deleted) == (1, 1)
    assert env.gone(stray)


async def test_a_fresh_stray_file_is_adopted_and_collected_once_old(env: GcEnv) -> None:
    stray = write_stray(env, blob("crashed just now"))

    report = await env.sweep()

    assert (report.orphans_adopted, report.deleted) == (1, 0)
    info = env.store.stat(stray)
    assert info is not None and info.media_type == "application/octet-stream"
    assert info.saved_at == pytest.approx(env.path(stray).stat().st_mtime)

    env.clock.advance(2 * GRACE_S)
    report = await env.sweep()
    assert (report.orphans_adopted, report.deleted) == (0, 1)
    assert env.gone(stray)


async def test_a_stray_file_a_message_names_is_adopted_and_kept(env: GcEnv) -> None:
    data = blob("recorded by a save the crash cut short")
    stray = write_stray(env, data, age_s=GRACE_S + 60)
    await env.emit(MediaRef(stray, "image/jpeg", len(data)))

    report = await env.sweep()

    assert report.orphans_adopted == 1
    assert env.present(stray)


def age(path: Path, seconds: float) -> None:
    at = path.stat().st_mtime - seconds
    os.utime(path, (at, at))


async def test_stale_temp_files_and_scratch_folders_go_fresh_ones_stay(env: GcEnv) -> None:
    env.store.save_sync(b"first save prepares the store", "text/plain")
    parts = env.store.tmp_dir
    stale_part, fresh_part = parts / "part-stale.tmp", parts / "part-fresh.tmp"
    scratch = env.data_dir / "tmp" / "recorder"
    stale_clip, fresh_clip = scratch / "clip-x", scratch / "clip-y"
    for path in (stale_part, fresh_part):
        path.write_bytes(b"half an upload")
    for folder in (stale_clip, fresh_clip):
        folder.mkdir(parents=True)
        (folder / "seg-0001.ts").write_bytes(b"segment")
    (fresh_clip / "seg-0000.ts").write_bytes(b"older segment")
    for path in (stale_part, stale_clip / "seg-0001.ts", stale_clip, fresh_clip / "seg-0000.ts"):
        age(path, 2 * 3600)  # a clip folder is fresh while any file in it is
    env.clock.advance(GRACE_S + 1)

    report = await env.sweep(temp_age_s=3600)

    assert report.temp_removed == 2
    assert not stale_part.exists() and not stale_clip.exists()
    assert fresh_part.exists() and (fresh_clip / "seg-0001.ts").exists()
    assert scratch.is_dir()


# -- dead letters, run records, counters -------------------------------------------------


async def make_dead_letters(env: GcEnv, count: int) -> list[MediaRef]:
    refs = [await env.save(blob(f"poison {i}")) for i in range(count)]
    for ref in refs:
        await dead_letter(env, ref)
    return refs


async def test_old_dead_letters_are_trimmed_and_their_artifacts_follow(env: GcEnv) -> None:
    refs = await make_dead_letters(env, 3)

    report = await env.sweep(now=env.clock() + 2 * DAY_S, dead_letter_days=1)

    assert report.dead_letters_trimmed == 3
    assert await env.queue.dead_letters() == []
    # The live set was read before the trim: they go at the next sweep.
    assert all(env.present(r) for r in refs)
    await env.sweep(now=env.clock() + 2 * DAY_S, dead_letter_days=1)
    assert all(env.gone(r) for r in refs)


async def test_dead_letters_beyond_the_newest_of_a_flow_are_trimmed(env: GcEnv) -> None:
    refs = await make_dead_letters(env, 5)
    env.clock.advance(GRACE_S + 1)

    report = await env.sweep(dead_letter_keep=2)

    assert report.dead_letters_trimmed == 3
    assert len(await env.queue.dead_letters()) == 2
    await env.sweep(dead_letter_keep=2)
    assert [env.present(r) for r in refs] == [False, False, False, True, True]


async def test_ended_run_records_are_pruned_open_ones_stay(env: GcEnv, state: StateStore) -> None:
    for i in range(4):
        state.start_run(f"old-{i}", "cams", owner_here())
        state.end_run(f"old-{i}", "stopped")
    state.start_run("open", "cams", owner_dead())

    report = await env.sweep(now=env.clock() + 2 * DAY_S, run_record_days=1, run_record_keep=2)

    # The newest two of the flow stay (the open one and old-3), whatever their age.
    assert report.runs_pruned == 3
    with closing(sqlite3.connect(state.path)) as db:
        left = {run_id for (run_id,) in db.execute("SELECT run_id FROM runs")}
    assert left == {"old-3", "open"}


async def test_gc_counters_add_up_over_sweeps(env: GcEnv) -> None:
    await env.save(blob("a", 100))
    env.clock.advance(GRACE_S + 1)
    first = await env.sweep()
    await env.save(blob("b", 200))
    await env.save(blob("c", 300))
    env.clock.advance(GRACE_S + 1)
    await env.sweep(dry_run=True)  # not counted
    second = await env.sweep()
    await env.sweep(max_bytes=1)  # nothing left to evict

    counters = env.store.gc_counters()

    assert (first.deleted, second.deleted) == (1, 2)
    assert (counters.sweeps, counters.deleted, counters.freed_bytes) == (3, 3, 600)
    assert (counters.evicted, counters.evicted_bytes) == (0, 0)
    assert counters.last_sweep_at == env.clock()


async def test_a_reader_that_opened_an_artifact_reads_it_whole_after_a_sweep(
    env: GcEnv,
) -> None:
    data = os.urandom(3 << 20)
    ref = await env.save(data)
    env.clock.advance(GRACE_S + 1)

    with env.store.open(ref) as reader:
        head = reader.read(1 << 20)
        await env.sweep()
        assert env.gone(ref)
        rest = reader.read()

    assert head + rest == data
