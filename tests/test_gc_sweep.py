"""``sweep_artifacts`` on a real store and a real SQLite queue, one behaviour per test.

The store runs on a fake clock (started at the real time, so the queue's and the
run records' real timestamps compare with it); a sweep is told its ``now``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from mediaflow.config import ConfigError
from mediaflow.engine.state_store import StateStore
from mediaflow.gc import GcSettings, SweepBusy, format_bytes, parse_bytes
from mediaflow.media import MediaRef
from mediaflow.store.locks import exclusive_or_busy, try_share, unshare
from tests.gc_helpers import (
    GRACE_S,
    STREAM,
    GcEnv,
    close_env,
    digest_of,
    open_env,
    owner_dead,
    owner_here,
)

DAY_S = 86400.0
KB = 1000


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[GcEnv]:
    opened = open_env(tmp_path / "data")
    yield opened
    await close_env(opened)


def blob(name: str, size: int = KB) -> bytes:
    """``size`` bytes that differ by ``name``."""
    seed = name.encode()
    return (seed * (size // len(seed) + 1))[:size]


async def save_in_turn(env: GcEnv, names: list[str]) -> list[MediaRef]:
    """Save one blob per name, a second apart, so their age order is the list's."""
    refs = []
    for name in names:
        refs.append(await env.save(blob(name)))
        env.clock.advance(1)
    return refs


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


async def delayed(env: GcEnv, ref: MediaRef) -> None:
    await env.emit(ref, delay_s=7 * DAY_S)


async def parked(env: GcEnv, ref: MediaRef) -> None:
    await env.queue.park(STREAM.flow)
    await env.emit(ref)


async def dead_letter(env: GcEnv, ref: MediaRef) -> None:
    await env.queue.dead_letter(await env.claim(ref), "decoder crashed")


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
        delayed,
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


@pytest.fixture
def state(env: GcEnv) -> Iterator[StateStore]:
    opened = StateStore(env.data_dir)
    yield opened
    opened.close()


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


# -- settings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("123", 123),
        ("50MB", 50_000_000),
        ("50mb", 50_000_000),
        ("2GiB", 2 << 30),
        ("1.5 GB", 1_500_000_000),
        (" 10 KiB ", 10 << 10),
        ("7B", 7),
        ("1TB", 10**12),
    ],
)
def test_parse_bytes(text: str, count: int) -> None:
    assert parse_bytes(text) == count


@pytest.mark.parametrize("text", ["", "banana", "MB", "-5MB", "5 XB", "1e6", "5 M B"])
def test_parse_bytes_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 KB"),
        (1_234_567, "1.2 MB"),
        (50_000_000, "50.0 MB"),
        (2 << 30, "2.1 GB"),
        (5 * 10**15, "5000.0 TB"),
    ],
)
def test_format_bytes(count: int, text: str) -> None:
    assert format_bytes(count) == text


GC_VARIABLES = [
    "ARTIFACT_GC_INTERVAL_S",
    "ARTIFACT_GC_GRACE_S",
    "ARTIFACT_MAX_BYTES",
    "ARTIFACT_CAP_CHECK_S",
    "MEDIAFLOW_DEAD_LETTER_DAYS",
    "MEDIAFLOW_DEAD_LETTER_KEEP",
    "MEDIAFLOW_RUN_RECORD_DAYS",
    "MEDIAFLOW_RUN_RECORD_KEEP",
    "MEDIAFLOW_TEMP_AGE_S",
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in GC_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_settings_default_without_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    assert GcSettings.from_env() == GcSettings()
    assert GcSettings().max_bytes is None and GcSettings().grace_s == 3600


@pytest.mark.parametrize(
    ("name", "value", "field", "expected"),
    [
        ("ARTIFACT_MAX_BYTES", "50MB", "max_bytes", 50_000_000),
        ("ARTIFACT_MAX_BYTES", "2GiB", "max_bytes", 2 << 30),
        ("ARTIFACT_MAX_BYTES", "4096", "max_bytes", 4096),
        ("ARTIFACT_MAX_BYTES", " ", "max_bytes", None),
        ("ARTIFACT_GC_INTERVAL_S", "0", "interval_s", 0.0),
        ("ARTIFACT_GC_GRACE_S", "60", "grace_s", 60.0),
        ("ARTIFACT_CAP_CHECK_S", "0.5", "cap_check_s", 0.5),
        ("MEDIAFLOW_DEAD_LETTER_DAYS", "7", "dead_letter_days", 7.0),
        ("MEDIAFLOW_DEAD_LETTER_KEEP", "0", "dead_letter_keep", 0),
        ("MEDIAFLOW_RUN_RECORD_DAYS", "1.5", "run_record_days", 1.5),
        ("MEDIAFLOW_RUN_RECORD_KEEP", "3", "run_record_keep", 3),
        ("MEDIAFLOW_TEMP_AGE_S", "600", "temp_age_s", 600.0),
    ],
)
def test_settings_from_the_environment(
    clean_env: pytest.MonkeyPatch, name: str, value: str, field: str, expected: object
) -> None:
    clean_env.setenv(name, value)
    assert getattr(GcSettings.from_env(), field) == expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ARTIFACT_MAX_BYTES", "banana"),
        ("ARTIFACT_MAX_BYTES", "0"),
        ("ARTIFACT_MAX_BYTES", "0MB"),
        ("ARTIFACT_MAX_BYTES", "-5"),
        ("ARTIFACT_MAX_BYTES", "-1GB"),
        ("ARTIFACT_GC_INTERVAL_S", "hourly"),
        ("ARTIFACT_GC_INTERVAL_S", "-1"),
        ("ARTIFACT_GC_GRACE_S", "-60"),
        ("ARTIFACT_CAP_CHECK_S", "0"),
        ("MEDIAFLOW_DEAD_LETTER_KEEP", "1.5"),
        ("MEDIAFLOW_DEAD_LETTER_DAYS", "-1"),
        ("MEDIAFLOW_RUN_RECORD_KEEP", "0"),
    ],
)
def test_settings_refuse_a_bad_value_naming_the_variable(
    clean_env: pytest.MonkeyPatch, name: str, value: str
) -> None:
    clean_env.setenv(name, value)
    with pytest.raises(ConfigError, match=name) as caught:
        GcSettings.from_env()
    assert "\n" not in str(caught.value)
