"""A read that follows a save in the same process is answered from the bytes just
saved (no thread hop), bounded in memory, and never for an artifact that is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mediaflow.store import ArtifactNotFound, ArtifactStore
from mediaflow.store.recent import MAX_ITEM_BYTES, RecentBytes

# -- the bounded map (pure) -------------------------------------------------------------------


def test_recent_bytes_drops_the_oldest_past_its_budget() -> None:
    recent = RecentBytes(max_bytes=10, max_item_bytes=8)
    recent.put("a", b"1234")
    recent.put("b", b"5678")
    recent.put("c", b"90")
    assert (len(recent), recent.size) == (3, 10)
    recent.put("d", b"xy")  # 12 bytes: "a" goes
    assert recent.get("a") is None
    assert [recent.get(k) for k in "bcd"] == [b"5678", b"90", b"xy"]
    assert recent.size == 8


@pytest.mark.parametrize(
    ("steps", "held", "size"),
    [
        ([("put", "a", b"123456789")], {}, 0),  # larger than one item may be: not kept
        ([("put", "a", b"12"), ("put", "a", b"12")], {"a": b"12"}, 2),  # saved twice
        ([("put", "a", b"12"), ("discard", "a", b"")], {}, 0),
        ([("discard", "never", b"")], {}, 0),
    ],
)
def test_recent_bytes_table(
    steps: list[tuple[str, str, bytes]], held: dict[str, bytes], size: int
) -> None:
    recent = RecentBytes(max_bytes=100, max_item_bytes=8)
    for op, key, data in steps:
        if op == "put":
            recent.put(key, data)
        else:
            recent.discard(key)
    assert {k: recent.get(k) for k in held} == held
    assert (len(recent), recent.size) == (len(held), size)


# -- the store ----------------------------------------------------------------------------------


async def test_a_read_after_a_save_needs_no_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ArtifactStore(tmp_path)
    data = b"RIFF a small chunk" * 100
    ref = await store.save(data, "audio/wav", {"seq": 1})

    def no_thread(*args: object, **kwargs: object) -> None:
        raise AssertionError("the read hopped to a thread")

    monkeypatch.setattr(asyncio, "to_thread", no_thread)
    assert await store.read(ref) == data
    assert await store.read(ref.digest) == data


async def test_an_artifact_deleted_elsewhere_is_missing_not_remembered(tmp_path: Path) -> None:
    store, sweeper = ArtifactStore(tmp_path), ArtifactStore(tmp_path)  # as two processes
    ref = await store.save(b"chunk" * 10, "audio/wav")
    assert sweeper.delete(ref.digest)
    with pytest.raises(ArtifactNotFound):
        await store.read(ref)
    # Saved again: there again, and read again.
    await store.save(b"chunk" * 10, "audio/wav")
    assert await store.read(ref) == b"chunk" * 10


async def test_only_small_immutable_buffers_are_remembered(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    big = await store.save(b"x" * (MAX_ITEM_BYTES + 1), "application/octet-stream")
    mutable = bytearray(b"a chunk a caller may reuse")
    small = await store.save(mutable, "audio/wav")
    mutable[:] = b"something else entirely!!!"
    assert store._recent.get(big.digest) is None
    assert store._recent.get(small.digest) is None
    assert await store.read(small) == b"a chunk a caller may reuse"
