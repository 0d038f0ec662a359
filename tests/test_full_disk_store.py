"""The artifact store on a disk that is really full: a small filesystem
(``tests/small_fs.py``), filled to a chosen number of free bytes. Nothing is mocked.

A save that does not fit raises :class:`StoreFull` naming the store and what to
do, and leaves nothing: no file at the digest's address, no temp file, no row.
Saves that fit still work, and once space returns every save does. Where mounting
is refused, :func:`test_a_file_size_limit_is_store_full_too` still runs (an
``RLIMIT_FSIZE`` child needs no privilege).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import sqlite3
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mediaflow.store import ArtifactStore, StoreFull
from tests.small_fs import (
    SmallFs,
    mounted_or_skip,
    run_with_fsize_limit,
    small_fs_fixture,  # noqa: F401 - the small_fs fixture
)
from tests.store_helpers import digest_of, payload

OCTETS = "application/octet-stream"
KiB = 1 << 10
BIG = 300 * KiB  # does not fit in what the tests leave free
SMALL = 8 * KiB  # does
LEAVE = 64 * KiB


def rows(store: ArtifactStore) -> dict[str, int]:
    """The store's metadata as SQLite holds it: digest -> size."""
    with contextlib.closing(sqlite3.connect(store.db_path)) as db:
        return dict(db.execute("SELECT digest, size FROM artifacts").fetchall())


def placed(store: ArtifactStore) -> set[str]:
    """Digests with a file in the fan-out directories (temp files excluded)."""
    return {
        "sha256:" + p.name
        for p in store.artifacts_dir.rglob("*")
        if p.is_file() and store.tmp_dir not in p.parents
    }


def assert_nothing_of(store: ArtifactStore, data: bytes) -> None:
    digest = digest_of(data)
    assert not store.exists(digest)
    assert not store.local_path(digest).exists()
    assert store.stat(digest) is None
    assert digest not in rows(store)
    assert list(store.tmp_dir.iterdir()) == []


def assert_consistent(store: ArtifactStore) -> None:
    """Every placed file has its row and every row its file; no temp file is left."""
    assert placed(store) == set(rows(store))
    assert list(store.tmp_dir.iterdir()) == []


async def achunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[start : start + size]


def chunks(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def save(store: ArtifactStore, data: bytes, kind: str, scratch: Path) -> str:
    """Save ``data`` the way ``kind`` names; return the digest."""
    if kind == "bytes":
        ref = await store.save(data, OCTETS)
    elif kind == "path":
        source = scratch / f"source-{digest_of(data)[7:19]}"  # off the small filesystem
        source.write_bytes(data)
        ref = await store.save(source, OCTETS)
    elif kind == "async-chunks":
        ref = await store.save(achunks(data, 16 * KiB), OCTETS)
    else:
        ref = await asyncio.to_thread(store.save_sync, chunks(data, 16 * KiB), OCTETS)
    return ref.digest


@pytest.fixture(params=["tmpfs", "ext4"])
def any_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SmallFs]:
    """An 8 MiB filesystem of each kind: tmpfs, and ext4 on a loop device."""
    with mounted_or_skip(tmp_path, request.param) as fs:
        yield fs


@pytest.mark.parametrize("kind", ["bytes", "path", "async-chunks", "sync-chunks"])
async def test_a_save_that_does_not_fit_raises_store_full_and_leaves_nothing(
    any_fs: SmallFs, tmp_path: Path, kind: str
) -> None:
    with ArtifactStore(any_fs.data_dir()) as store:
        await store.save(b"before the disk filled", "text/plain")
        fillers = any_fs.fill(leave=LEAVE)
        big = payload(1, BIG)

        with pytest.raises(StoreFull) as caught:
            await save(store, big, kind, tmp_path)

        full = caught.value
        assert full.errno == errno.ENOSPC and isinstance(full, OSError)
        assert full.filename == str(store.artifacts_dir)
        message = str(full)
        assert "artifact store full" in message and "No space left" in message
        assert "partial artifact was removed" in message and "free space" in message
        assert str(store.artifacts_dir) in message
        assert_nothing_of(store, big)

        # What fits is still saved, whole, on the same nearly full disk.
        small = payload(2, SMALL)
        digest = await save(store, small, kind, tmp_path)
        assert await store.read(digest) == small
        assert rows(store)[digest] == SMALL

        # The same save again, once space returns: nothing of the failure is in the way.
        assert fillers and any_fs.make_room() > BIG
        assert not any(filler.exists() for filler in fillers)
        digest = await save(store, big, kind, tmp_path)
        assert digest == digest_of(big) and await store.read(digest) == big
        assert_consistent(store)


async def test_saves_fill_the_disk_to_the_last_one_that_fits(small_fs: SmallFs) -> None:
    """Saving until the disk is full: each save either stores its artifact whole (file
    and row) or raises StoreFull and leaves nothing, never anything in between."""
    with ArtifactStore(small_fs.data_dir()) as store:
        await store.save(b"first", "text/plain")
        small_fs.fill(leave=1024 * KiB)
        stored: list[bytes] = []
        refused: list[bytes] = []
        for seed in range(40):
            data = payload(100 + seed, 100 * KiB)
            try:
                await store.save(data, OCTETS)
            except StoreFull:
                refused.append(data)
            else:
                stored.append(data)
        assert 5 <= len(stored) <= 10 and len(refused) == 40 - len(stored)
        for data in refused:
            assert_nothing_of(store, data)
        for data in stored:
            assert await store.read(digest_of(data)) == data
        assert_consistent(store)

        small_fs.make_room()
        for data in refused:
            await store.save(data, OCTETS)
        assert len(rows(store)) == 41
        assert_consistent(store)


async def test_a_row_that_cannot_be_written_takes_the_placed_file_back(
    small_fs: SmallFs,
) -> None:
    """The artifact's bytes fit exactly, but then the metadata cannot grow: the save
    raises StoreFull naming the metadata file, and the file it had already placed is
    gone again (a 507 answer must not be followed by a 200 for the same digest)."""
    with ArtifactStore(small_fs.data_dir()) as store:
        await store.save(b"first", "text/plain")
        data = payload(3, 3 * small_fs.block_size())  # exactly three tmpfs pages
        small_fs.fill(leave=len(data))

        with pytest.raises(StoreFull) as caught:
            await store.save(data, OCTETS)

        assert caught.value.filename == str(store.db_path)  # the row, not the bytes
        message = str(caught.value)
        assert "artifact store full" in message and "metadata could not grow" in message
        assert "free space" in message
        assert_nothing_of(store, data)
        assert small_fs.free_bytes() == len(data)  # the placed file's space came back

        small_fs.make_room()
        await store.save(data, OCTETS)
        assert await store.read(digest_of(data)) == data
        assert_consistent(store)


# -- without a mount: a file size limit (EFBIG) ---------------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, json, os, random, sqlite3
    from mediaflow.store import ArtifactStore, StoreFull

    async def main():
        report = {}
        with ArtifactStore("data") as store:
            small = await store.save(b"fits under the limit", "text/plain")
            big = random.Random(7).randbytes(300 * 1024)
            try:
                await store.save(big, "application/octet-stream")
            except StoreFull as exc:
                report["error"] = [type(exc).__name__, exc.errno, str(exc), exc.filename]
            digest = "sha256:" + __import__("hashlib").sha256(big).hexdigest()
            report["exists"] = store.exists(digest)
            report["temp"] = os.listdir(store.tmp_dir)
            report["small"] = (await store.read(small)).decode()
            db = sqlite3.connect(store.db_path)
            report["rows"] = [r[0] for r in db.execute("SELECT digest FROM artifacts")]
            db.close()
            report["digest"] = digest
        print(json.dumps(report))

    asyncio.run(main())
    """
)


def test_a_file_size_limit_is_store_full_too(tmp_path: Path) -> None:
    """No mount needed: a child whose files may not pass 200 KiB (RLIMIT_FSIZE) gets
    EFBIG from the kernel, which the store reports as StoreFull, leaving nothing."""
    done = run_with_fsize_limit(CHILD, 200 * KiB, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    kind, code, message, filename = report["error"]
    assert kind == "StoreFull" and code == errno.EFBIG
    assert "too large" in message and "file size limit" in message
    assert Path(filename) == Path("data/artifacts")
    assert report["exists"] is False and report["temp"] == []
    assert report["digest"] not in report["rows"] and len(report["rows"]) == 1
    assert report["small"] == "fits under the limit"
