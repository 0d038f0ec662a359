"""What the artifact store refuses, and what a failed save leaves behind: nothing.

The one fault injected by hand is a full disk: the real ``_write_all`` is
wrapped to raise ENOSPC/EDQUOT after its first call.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mediaflow.media import MediaError
from mediaflow.store import ArtifactNotFound, ArtifactStore, StoreFull
from mediaflow.store import files as store_files
from tests.store_helpers import achunks, chunks, digest_of, payload
from tests.store_support import (
    OCTETS,
    MiB,
    artifact_files,
    row_count,
    store_fixture,  # noqa: F401 - the store fixture
    temp_files,
)

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
