"""Payloads and chunked sources for the store tests, and the code run in processes
spawned by ``test_store_processes.py`` (spawned, so it must be importable)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

from mediaflow.store import ArtifactStore

MEDIA_TYPE = "application/octet-stream"


def payload(seed: int, size: int) -> bytes:
    """Deterministic pseudo-random bytes: every process derives the same payload from a seed."""
    return random.Random(seed).randbytes(size)


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def chunks(data: bytes, size: int, pause_s: float = 0.0) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        if pause_s:
            time.sleep(pause_s)
        yield data[start : start + size]


async def achunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for piece in chunks(data, size):
        await asyncio.sleep(0)
        yield piece


def save_rounds(
    data_dir: str, rounds: int, size: int, barrier: Barrier, use_async: bool, out: str
) -> None:
    """Save payload ``i`` in round ``i``, starting each round with the other process.

    Even rounds save a buffer (hash first, skip if present), odd rounds a stream
    (always writes a temp file), so both paths meet the race.
    """
    store = ArtifactStore(Path(data_dir))
    digests = []
    for i in range(rounds):
        data = payload(i, size)
        barrier.wait(timeout=20)
        if use_async:
            source_a = data if i % 2 == 0 else achunks(data, 256 * 1024)
            ref = asyncio.run(store.save(source_a, MEDIA_TYPE))
        else:
            source_s = data if i % 2 == 0 else chunks(data, 256 * 1024)
            ref = store.save_sync(source_s, MEDIA_TYPE)
        digests.append(ref.digest)
    store.close()
    Path(out).write_text(json.dumps(digests))


def save_slowly(data_dir: str, seeds: list[int], size: int, start: Event) -> None:
    """Save each seed's payload in many small, paced writes, so partial files live long."""
    store = ArtifactStore(Path(data_dir))
    start.wait(timeout=60)
    for seed in seeds:
        store.save_sync(chunks(payload(seed, size), 64 * 1024, pause_s=0.0005), "video/mp4")
    store.close()
