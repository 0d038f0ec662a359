"""The artifact store's metadata and housekeeping: the same bytes stored once, a
lazily created WAL database, temp files swept, lost rows repaired, iteration and
deletion, and the keeps of runs.
"""

from __future__ import annotations

import os
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mediaflow.store import ArtifactNotFound, ArtifactStore
from tests.store_helpers import chunks, digest_of, payload
from tests.store_support import (
    OCTETS,
    artifact_files,
    row_count,
    store_fixture,  # noqa: F401 - the store fixture
    temp_files,
)

# -- dedup, metadata, housekeeping ------------------------------------------------------------


async def test_same_bytes_are_stored_once_and_the_first_media_type_is_kept(
    store: ArtifactStore,
) -> None:
    first = await store.save(b"\x89PNG...", "image/png")
    again = await store.save(chunks(b"\x89PNG...", 2), OCTETS)

    assert again.digest == first.digest
    assert again.media_type == OCTETS  # the reference says what this caller saved
    info = store.stat(first)
    assert info is not None and info.media_type == "image/png"  # the store keeps the first
    assert len(artifact_files(store)) == 1 and row_count(store) == 1
    assert store.total_bytes() == first.size


async def test_many_threads_saving_overlapping_payloads(store: ArtifactStore) -> None:
    payloads = [payload(seed, 512 * 1024) for seed in range(4)]

    def work(i: int) -> str:
        data = payloads[i % 4]
        source = data if i % 2 else chunks(data, 64 * 1024)
        return store.save_sync(source, OCTETS).digest

    with ThreadPoolExecutor(8) as pool:
        digests = list(pool.map(work, range(32)))

    assert digests == [digest_of(payloads[i % 4]) for i in range(32)]
    assert len(artifact_files(store)) == 4 and row_count(store) == 4
    assert temp_files(store) == []


async def test_the_store_is_created_lazily_in_wal_mode(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    store = ArtifactStore(data_dir)
    assert not data_dir.exists()
    assert not store.exists(digest_of(b"x"))
    assert not data_dir.exists()

    await store.save(b"x", "text/plain")
    store.close()
    with sqlite3.connect(store.db_path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert {"artifacts", "run_artifact"} <= tables
    assert ArtifactStore(data_dir).stat(digest_of(b"x")) is not None  # reopened from disk
    assert store.stat(digest_of(b"x")) is not None  # a closed store reconnects on use


async def test_stale_temp_files_are_swept_on_startup(tmp_path: Path) -> None:
    tmp_dir = tmp_path / "data" / "artifacts" / "tmp"
    tmp_dir.mkdir(parents=True)
    crashed = tmp_dir / "part-crashed.tmp"
    crashed.write_bytes(b"half an artifact")
    two_hours_ago = time.time() - 7200
    os.utime(crashed, (two_hours_ago, two_hours_ago))
    in_progress = tmp_dir / "part-live.tmp"
    in_progress.write_bytes(b"another process is writing this")

    store = ArtifactStore(tmp_path / "data")
    await store.save(b"x", "text/plain")

    assert not crashed.exists()
    assert in_progress.exists()
    assert store.sweep_temp(older_than_s=0) == 1
    assert not in_progress.exists()


async def test_a_file_whose_row_was_lost_is_still_served_and_repaired(
    store: ArtifactStore,
) -> None:
    ref = await store.save(b"frame", "image/jpeg")
    with sqlite3.connect(store.db_path) as db:  # as after a crash between link and insert
        db.execute("DELETE FROM artifacts")

    info = store.stat(ref)
    assert info is not None and (info.size, info.media_type) == (5, OCTETS)
    await store.save(b"frame", "image/jpeg")
    info = store.stat(ref)
    assert info is not None and info.media_type == "image/jpeg"


async def test_iterate_oldest_first_and_delete_while_iterating(store: ArtifactStore) -> None:
    refs = []
    for i in range(7):
        refs.append(await store.save(f"frame {i}".encode(), "image/jpeg"))
    assert store.total_bytes() == sum(r.size for r in refs)

    seen = []
    for info in store.iter_infos(batch=2):
        seen.append(info.digest)
        assert info.path == store.path_for(info.digest) and info.path.is_file()
        assert store.delete(info.digest) is True

    assert seen == [r.digest for r in refs]
    assert artifact_files(store) == [] and row_count(store) == 0
    assert store.total_bytes() == 0
    assert store.delete(refs[0].digest) is False


async def test_delete_removes_a_row_whose_file_is_already_gone(store: ArtifactStore) -> None:
    ref = await store.save(b"x", "text/plain")
    store.path_for(ref.digest).unlink()  # as after a crash inside delete
    assert [i.digest for i in store.iter_infos()] == [ref.digest]
    assert store.delete(ref.digest) is True
    assert list(store.iter_infos()) == []


async def test_keep_records_runs_that_hold_an_artifact(store: ArtifactStore) -> None:
    ref = await store.save(b"clip", "video/mp4")
    other = await store.save(b"other", "video/mp4")

    assert store.is_kept(ref.digest) is False
    assert store.keep("run-1", ref.digest) is True
    assert store.keep("run-1", ref.digest) is False
    assert store.keep("run-2", ref.digest) is True
    assert store.is_kept(ref.digest) and not store.is_kept(other.digest)
    assert ArtifactStore(store.data_dir).is_kept(ref.digest)  # durable, seen by other stores

    with pytest.raises(ArtifactNotFound):
        store.keep("run-1", digest_of(b"unknown"))
    with pytest.raises(ValueError):
        store.keep("", ref.digest)

    assert store.release("run-1") == 1
    assert store.is_kept(ref.digest)  # run-2 still keeps it
    assert store.release("run-2") == 1
    assert not store.is_kept(ref.digest)
