"""The artifact store, used the way the engine and GC will: real files, SQLite, processes.

The one fault injected by hand is a full disk: the real ``_write_all`` is
wrapped to raise ENOSPC/EDQUOT after its first call.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import multiprocessing
import os
import sqlite3
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mediaflow.media import MediaError, MediaRef
from mediaflow.store import (
    ArtifactNotFound,
    ArtifactStore,
    StoreFull,
    current_store,
    save_artifact,
    use_store,
)
from mediaflow.store import files as store_files
from tests.store_helpers import achunks, chunks, digest_of, payload, save_rounds, save_slowly

MiB = 1 << 20
OCTETS = "application/octet-stream"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ArtifactStore]:
    with ArtifactStore(tmp_path / "data") as s:
        yield s


def artifact_files(store: ArtifactStore) -> list[Path]:
    """Every placed artifact file (temp files excluded)."""
    return sorted(
        p for p in store.artifacts_dir.rglob("*") if p.is_file() and store.tmp_dir not in p.parents
    )


def temp_files(store: ArtifactStore) -> list[Path]:
    return sorted(store.tmp_dir.iterdir()) if store.tmp_dir.exists() else []


def row_count(store: ArtifactStore) -> int:
    with sqlite3.connect(store.db_path) as db:
        return int(db.execute("SELECT COUNT(*) FROM artifacts").fetchone()[0])


def write_file(path: Path, size: int) -> str:
    """Write ``size`` random bytes in 1 MiB pieces; return their digest."""
    hasher = hashlib.sha256()
    with open(path, "wb") as out:
        for _ in range(size // MiB):
            piece = os.urandom(MiB)
            hasher.update(piece)
            out.write(piece)
    return "sha256:" + hasher.hexdigest()


# -- saving from every kind of source -------------------------------------------------------


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=lambda w: w.__name__)
async def test_save_a_buffer_then_read_it_every_way(store: ArtifactStore, wrap: type) -> None:
    data = b"a JPEG, honestly" * 1000
    meta = {"source": "cam", "seq": 7}

    ref = await store.save(wrap(data), "image/jpeg", meta)

    assert ref == MediaRef(digest_of(data), "image/jpeg", len(data), meta)
    assert await store.read(ref) == data
    assert await store.read(ref.digest) == data
    with store.open(ref) as f:
        assert f.read() == data
    assert store.exists(ref) and store.exists(ref.digest)
    hex_digits = ref.hex
    assert store.path_for(ref.digest) == (
        store.data_dir / "artifacts" / hex_digits[:2] / hex_digits[2:4] / hex_digits
    )
    info = store.stat(ref)
    assert info is not None
    assert (info.digest, info.size, info.media_type) == (ref.digest, len(data), "image/jpeg")
    assert abs(info.created_at - time.time()) < 60
    assert info.path.read_bytes() == data
    assert info.to_ref(meta) == ref
    assert temp_files(store) == []


async def test_meta_belongs_to_the_reference_not_the_store(store: ArtifactStore) -> None:
    meta = {"source": "mic", "seq": 1}
    first = await store.save(b"chunk", "audio/wav", meta)
    meta["seq"] = 2  # the caller reusing its dict must not change the reference
    second = await store.save(b"chunk", "audio/wav", {"seq": 99})

    assert first.meta == {"source": "mic", "seq": 1}
    assert second.meta == {"seq": 99}
    assert first.digest == second.digest
    with sqlite3.connect(store.db_path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(artifacts)")]
    assert columns == ["digest", "size", "media_type", "created_at", "saved_at"]


async def test_empty_artifact(store: ArtifactStore) -> None:
    ref = await store.save(b"", "text/plain")
    assert ref.digest == digest_of(b"") and ref.size == 0
    assert await store.read(ref) == b""


async def test_a_20_mib_path_is_streamed_in_constant_memory(
    store: ArtifactStore, tmp_path: Path
) -> None:
    source = tmp_path / "clip.mp4"
    expected = write_file(source, 20 * MiB)

    tracemalloc.start()
    try:
        ref = await store.save(source, "video/mp4")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert ref.digest == expected and ref.size == 20 * MiB
    assert peak < 4 * MiB, f"peak {peak / MiB:.1f} MiB for a 20 MiB file"
    assert store.save_sync(str(source), "video/mp4").digest == expected  # a str is a path too
    assert len(artifact_files(store)) == 1


async def test_an_async_iterator_is_saved_in_constant_memory(store: ArtifactStore) -> None:
    piece = os.urandom(64 * 1024)
    total = 48 * MiB

    async def stream() -> AsyncIterator[bytes]:
        for _ in range(total // len(piece)):
            yield piece

    hasher = hashlib.sha256()
    for _ in range(total // len(piece)):
        hasher.update(piece)

    tracemalloc.start()
    try:
        ref = await store.save(stream(), "audio/wav")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert ref.digest == "sha256:" + hasher.hexdigest() and ref.size == total
    assert peak < 6 * MiB, f"peak {peak / MiB:.1f} MiB for a 48 MiB stream"


async def test_async_chunks_of_every_size_and_kind(store: ArtifactStore) -> None:
    pieces: list[bytes | bytearray | memoryview] = [
        b"x" * 10,
        bytearray(b"y" * (3 * MiB)),  # bigger than a batch, mutable: must be copied
        b"z" * (2 * MiB),  # bigger than a batch, immutable: handed over as is
        memoryview(b"w" * 1000),
        b"",
    ]

    async def stream() -> AsyncIterator[bytes | bytearray | memoryview]:
        for p in pieces:
            yield p

    data = b"".join(bytes(p) for p in pieces)
    ref = await store.save(stream(), OCTETS)
    assert ref.digest == digest_of(data)
    assert await store.read(ref) == data


async def test_a_sync_iterable_is_saved_from_the_loop_and_from_threads(
    store: ArtifactStore,
) -> None:
    data = payload(1, 3 * MiB + 17)
    ref_async = await store.save(chunks(data, 100_000), OCTETS)
    ref_sync = await asyncio.to_thread(store.save_sync, chunks(data, 333_333), OCTETS)
    ref_list = store.save_sync([data[:5], bytearray(data[5:])], OCTETS)
    assert ref_async == ref_sync == ref_list
    assert ref_async.digest == digest_of(data)


async def test_saving_a_path_does_not_block_the_loop(store: ArtifactStore, tmp_path: Path) -> None:
    """The loop keeps running while the file is written: it sees the temp file grow."""
    source = tmp_path / "big.bin"
    write_file(source, 48 * MiB)
    partial_sizes: list[int] = []
    done = False

    async def watch() -> None:
        while not done:
            for part in temp_files(store):
                try:
                    size = part.stat().st_size
                except FileNotFoundError:
                    continue
                if 0 < size < 48 * MiB:
                    partial_sizes.append(size)
            await asyncio.sleep(0.001)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0)
    await store.save(source, OCTETS)
    done = True
    await watcher
    assert partial_sizes, "the event loop never ran while the artifact was being written"


# -- refusals -----------------------------------------------------------------------------

MALFORMED = [
    "sha256:../../etc/passwd",
    "sha256:" + "../" * 21 + "a",
    "../../../etc/passwd",
    "sha256:" + "A" * 64,
    "sha256:" + "0" * 63,
    "sha256:" + "0" * 65,
    "sha256:" + "0" * 64 + "\n",
    "md5:" + "0" * 32,
    "",
]


@pytest.mark.parametrize("digest", MALFORMED)
async def test_malformed_digests_are_refused_everywhere(store: ArtifactStore, digest: str) -> None:
    with pytest.raises(MediaError):
        store.path_for(digest)
    with pytest.raises(MediaError):
        store.exists(digest)
    with pytest.raises(MediaError):
        store.stat(digest)
    with pytest.raises(MediaError):
        store.open(digest)
    with pytest.raises(MediaError):
        await store.read(digest)
    with pytest.raises(MediaError):
        store.delete(digest)
    with pytest.raises(MediaError):
        store.keep("run-1", digest)


async def test_an_unknown_digest_is_not_found(store: ArtifactStore) -> None:
    digest = digest_of(b"never saved")
    with pytest.raises(ArtifactNotFound, match=digest) as caught:
        await store.read(digest)
    assert isinstance(caught.value, KeyError) and caught.value.digest == digest
    with pytest.raises(ArtifactNotFound, match=digest):
        store.open(digest)
    assert store.stat(digest) is None
    assert not store.exists(digest)
    assert store.delete(digest) is False


async def test_bad_arguments_leave_nothing_behind(store: ArtifactStore) -> None:
    with pytest.raises(MediaError):
        await store.save(b"x", "not a media type")
    with pytest.raises(TypeError, match="int"):
        await store.save(42, OCTETS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str"):
        await store.save(iter(["text, not bytes"]), OCTETS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="async"):
        store.save_sync(achunks(b"x", 1), OCTETS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="meta"):
        await store.save(b"x", OCTETS, ["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        await store.save(store.data_dir / "missing.wav", "audio/wav")
    assert temp_files(store) == [] and artifact_files(store) == []


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_failing_source_leaves_no_temp_file(store: ArtifactStore, kind: str) -> None:
    def broken() -> Iterator[bytes]:
        yield b"a" * MiB
        yield b"b" * MiB
        raise RuntimeError("camera unplugged")

    async def abroken() -> AsyncIterator[bytes]:
        for piece in broken():
            yield piece

    with pytest.raises(RuntimeError, match="unplugged"):
        if kind == "sync":
            store.save_sync(broken(), "video/mp4")
        else:
            await store.save(abroken(), "video/mp4")
    assert temp_files(store) == [] and artifact_files(store) == []
    assert store.total_bytes() == 0


async def test_cancelling_a_streaming_save_removes_its_temp_file(store: ArtifactStore) -> None:
    never = asyncio.Event()

    async def stalls() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"f" * MiB
        await never.wait()
        yield b"never"

    task = asyncio.create_task(store.save(stalls(), "video/mp4"))
    deadline = time.monotonic() + 10
    while not any(p.stat().st_size > 0 for p in temp_files(store)):
        assert time.monotonic() < deadline, "the save never started writing"
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert temp_files(store) == [] and artifact_files(store) == []


# -- full disk (the one injected fault) ------------------------------------------------------


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT], ids=errno.errorcode.get)
@pytest.mark.parametrize("kind", ["path", "sync-chunks", "async-chunks", "bytes"])
async def test_a_full_disk_raises_store_full_and_leaves_nothing(
    store: ArtifactStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, kind: str
) -> None:
    await store.save(b"already here", "text/plain")  # the store and its tmp dir exist
    data = payload(3, 3 * MiB)
    source_path = tmp_path / "in.bin"
    source_path.write_bytes(data)
    real_write_all = store_files._write_all
    calls = 0

    def fills_up(fd: int, view: memoryview) -> None:
        nonlocal calls
        calls += 1
        if calls > 1 or kind == "bytes":
            raise OSError(code, os.strerror(code))
        real_write_all(fd, view)

    monkeypatch.setattr(store_files, "_write_all", fills_up)
    with pytest.raises(StoreFull) as caught:
        if kind == "path":
            await store.save(source_path, OCTETS)
        elif kind == "sync-chunks":
            await asyncio.to_thread(store.save_sync, chunks(data, MiB), OCTETS)
        elif kind == "async-chunks":
            await store.save(achunks(data, MiB), OCTETS)
        else:
            await store.save(data, OCTETS)

    assert isinstance(caught.value, OSError) and caught.value.errno == code
    assert "full" in str(caught.value) and str(store.artifacts_dir) in str(caught.value)
    assert temp_files(store) == []
    assert not store.exists(digest_of(data))
    assert len(artifact_files(store)) == 1 and row_count(store) == 1


async def test_other_write_errors_propagate_as_they_are(
    store: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(fd: int, view: memoryview) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(store_files, "_write_all", fails)
    with pytest.raises(OSError) as caught:
        await store.save(b"x" * 1000, OCTETS)
    assert not isinstance(caught.value, StoreFull) and caught.value.errno == errno.EIO
    assert temp_files(store) == []


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


# -- the current store ------------------------------------------------------------------------


async def test_save_artifact_uses_the_given_then_the_current_then_the_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDIAFLOW_DATA", str(tmp_path / "default"))
    given = ArtifactStore(tmp_path / "given")
    engine = ArtifactStore(tmp_path / "engine")

    ref = await save_artifact(b"a", "text/plain", store=given)
    assert given.exists(ref) and not engine.exists(ref)

    with use_store(engine):
        assert current_store() is engine
        ref_b = await save_artifact(b"b", "text/plain", {"seq": 1})
        # tasks and worker threads started inside inherit the store
        ref_c = await asyncio.create_task(save_artifact(b"c", "text/plain"))
        assert await asyncio.to_thread(current_store) is engine
    assert engine.exists(ref_b) and engine.exists(ref_c) and ref_b.meta == {"seq": 1}

    default = current_store()
    assert default.data_dir == tmp_path / "default" and current_store() is default
    ref_d = await save_artifact(b"d", "text/plain")
    assert ArtifactStore(tmp_path / "default").exists(ref_d)


# -- several processes on one data dir --------------------------------------------------------


def test_two_processes_saving_the_same_bytes_store_each_once(tmp_path: Path) -> None:
    rounds, size = 50, MiB
    data_dir = tmp_path / "shared"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    outs = [tmp_path / "sync.json", tmp_path / "async.json"]
    procs = [
        ctx.Process(
            target=save_rounds, args=(str(data_dir), rounds, size, barrier, use_async, str(out))
        )
        for use_async, out in zip([False, True], outs, strict=True)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0

    expected = [digest_of(payload(i, size)) for i in range(rounds)]
    assert [json.loads(out.read_text()) for out in outs] == [expected, expected]
    store = ArtifactStore(data_dir)
    placed = artifact_files(store)
    assert len(placed) == rounds
    assert {"sha256:" + artifact.name for artifact in placed} == set(expected)
    for artifact in placed[:5]:
        assert digest_of(artifact.read_bytes()) == "sha256:" + artifact.name
    assert row_count(store) == rounds
    assert temp_files(store) == []


def test_a_reader_never_sees_a_partial_artifact(tmp_path: Path) -> None:
    seeds, size = list(range(100, 112)), 4 * MiB
    data_dir = tmp_path / "shared"
    store = ArtifactStore(data_dir)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    writer = ctx.Process(target=save_slowly, args=(str(data_dir), seeds, size, start))
    writer.start()
    pending = {digest_of(payload(seed, size)) for seed in seeds}
    polls = reads = 0

    def poll_once() -> None:
        nonlocal polls, reads
        for digest in sorted(pending):
            polls += 1
            if polls % 2:
                if not store.exists(digest):
                    continue
                f = store.open(digest)
            else:
                try:
                    f = store.open(digest)
                except ArtifactNotFound:
                    continue
            with f:
                data = f.read()
            reads += 1
            assert len(data) == size, f"saw {len(data)} of {size} bytes of {digest}"
            assert digest_of(data) == digest
            pending.discard(digest)

    start.set()
    deadline = time.monotonic() + 60
    while pending and writer.is_alive() and time.monotonic() < deadline:
        poll_once()
    writer.join(timeout=60)
    assert writer.exitcode == 0
    poll_once()
    assert not pending
    assert polls > 10 * len(seeds), "the reader hardly polled while the writer wrote"
    assert reads == len(seeds)


def test_threads_in_one_process_share_the_metadata_connection(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "data")
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(200):
                store.total_bytes()
                list(store.iter_infos())
        except BaseException as exc:  # reported to the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(50):
        store.save_sync(f"{i}".encode(), "text/plain")
    for t in threads:
        t.join()
    assert errors == []
    assert store.total_bytes() == sum(len(f"{i}".encode()) for i in range(50))
