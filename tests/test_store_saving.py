"""The artifact store saving from every kind of source (buffers, paths, sync and
async iterables), in constant memory and off the event loop, and the current store
``save_artifact`` uses.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mediaflow.media import MediaRef
from mediaflow.store import ArtifactStore, current_store, save_artifact, use_store
from tests.store_helpers import chunks, digest_of, payload
from tests.store_support import (
    OCTETS,
    MiB,
    artifact_files,
    store_fixture,  # noqa: F401 - the store fixture
    temp_files,
    write_file,
)

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
