"""The GC bench's store: N artifacts on disk and in ``store.sqlite3``, a fraction of
them referenced from the queue, and the check of what a sweep left of them.

This is the fixture, kept apart from the runs that time sweeps of it: it knows the
store's fan-out layout and schema and how the engine references an artifact from
the queue (:class:`Ref`), and nothing about measuring. :func:`populate` builds the
master store once per size; :func:`copy_tree` gives each run its own copy;
:func:`check_left` says whether exactly the referenced artifacts are left.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench._lib.common import Json, run_async

DAY_S = 86400.0
ENQUEUE_BATCH = 1000
MEDIA_TYPES = ("image/jpeg", "audio/wav", "video/mp4", "application/json")
FILL = bytes(range(256))


# -- the population ------------------------------------------------------------------


def payload(i: int) -> bytes:
    """Artifact ``i``'s bytes: distinct, 64-200 bytes."""
    head = b"mediaflow bench artifact %d\n" % i
    size = 64 + (i * 7919) % 137
    return head + FILL[: size - len(head)]


@dataclass(frozen=True)
class Ref:
    digest: str
    media_type: str
    size: int
    index: int

    def to_value(self) -> Json:
        ref = {"digest": self.digest, "media_type": self.media_type, "size": self.size}
        return {"$ref": {**ref, "meta": {"seq": self.index}}}


def populate(data_dir: Path, n: int, referenced: float, seed: int) -> tuple[list[Ref], Json]:
    """Build the store; return the referenced artifacts and how long each part took."""
    from mediaflow.store import ArtifactStore

    timings: Json = {}
    store = ArtifactStore(data_dir)
    store.total_bytes()  # opens the metadata: creates and migrates the schema
    store.close()
    (data_dir / "artifacts" / "tmp").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    chosen = set(rng.sample(range(n), round(n * referenced)))
    now = time.time()
    oldest = now - 30 * DAY_S
    step = 15 * DAY_S / max(n, 1)  # created 30 to 15 days ago, oldest first
    refs: list[Ref] = []
    started = time.perf_counter()
    conn = sqlite3.connect(data_dir / "store.sqlite3", isolation_level=None)
    try:
        # Populating only (the sweep opens the file as the store does): no syncs, a big cache.
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -256000")
        rows_s = 0.0
        for chunk in _chunks(range(n), 50_000):
            rows = list(_write_files(data_dir / "artifacts", chunk, oldest, step, chosen, refs))
            at = time.perf_counter()
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT INTO artifacts (digest, size, media_type, created_at, saved_at)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            conn.execute("COMMIT")
            rows_s += time.perf_counter() - at
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    timings["files_and_rows_s"] = time.perf_counter() - started
    timings["rows_s"] = rows_s
    started = time.perf_counter()
    timings["queue"] = run_async(fill_queue(data_dir, refs, rng))
    timings["queue_s"] = time.perf_counter() - started
    return refs, timings


def _chunks(values: range, size: int) -> Iterator[range]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _write_files(
    artifacts: Path, indices: range, oldest: float, step: float, chosen: set[int], refs: list[Ref]
) -> Iterator[tuple[str, int, str, float, float]]:
    made: set[str] = set()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for i in indices:
        data = payload(i)
        hex_digits = hashlib.sha256(data).hexdigest()
        folder = f"{artifacts}/{hex_digits[0:2]}/{hex_digits[2:4]}"
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        at = oldest + i * step
        fd = os.open(f"{folder}/{hex_digits}", flags, 0o444)  # read-only, as the store makes them
        try:
            os.write(fd, data)
            os.utime(fd, (at, at))
        finally:
            os.close(fd)
        digest = "sha256:" + hex_digits
        media_type = MEDIA_TYPES[i % len(MEDIA_TYPES)]
        if i in chosen:
            refs.append(Ref(digest, media_type, len(data), i))
        yield digest, len(data), media_type, at, at


async def fill_queue(data_dir: Path, refs: list[Ref], rng: random.Random) -> Json:
    """Reference ``refs`` from the queue: 1 % dead letters, 0.5 % latest values,
    10 % claimed (pending) items, the rest ready items; 16 streams."""
    from mediaflow.queue import NewItem, SqliteQueue, StreamKey

    shuffled = list(refs)
    rng.shuffle(shuffled)
    total = len(shuffled)
    n_dead, n_latest = max(1, total // 100), max(1, total // 200)
    n_pending = total // 10
    dead = shuffled[:n_dead]
    latest = shuffled[n_dead : n_dead + n_latest]
    rest = shuffled[n_dead + n_latest :]
    pending, ready = rest[:n_pending], rest[n_pending:]
    streams = [StreamKey(f"flow{f}", f"node{k}") for f in range(4) for k in range(4)]
    now = time.time()

    def item(ref: Ref, stream: StreamKey) -> NewItem:
        body = {"src": "camera", "port": "frame", "value": ref.to_value(), "at": now}
        return NewItem(stream, "emission", body)

    queue = SqliteQueue.in_dir(data_dir)
    try:
        for group, claim_for in ((ready, None), (pending, "bench-consumer")):
            for start in range(0, len(group), ENQUEUE_BATCH):
                batch = group[start : start + ENQUEUE_BATCH]
                items = [item(r, streams[(start + j) % len(streams)]) for j, r in enumerate(batch)]
                await queue.commit(items, claim_for=claim_for)
        failing = StreamKey("flowdead", "sink")
        for start in range(0, len(dead), ENQUEUE_BATCH):
            await queue.commit([item(r, failing) for r in dead[start : start + ENQUEUE_BATCH]])
        dead_lettered = 0
        while dead_lettered < len(dead):
            claimed = await queue.claim("bench-failing", {failing: ENQUEUE_BATCH})
            if not claimed:
                raise RuntimeError(f"dead letters: claimed {dead_lettered} of {len(dead)}")
            for work in claimed:
                await queue.dead_letter(work, "bench: RuntimeError('always fails')")
            dead_lettered += len(claimed)
        for start in range(0, len(latest), ENQUEUE_BATCH):
            batch = latest[start : start + ENQUEUE_BATCH]
            await queue.put_latest(
                {("flow0", "camera", f"port{start + j}"): r.to_value() for j, r in enumerate(batch)}
            )
    finally:
        await queue.close()
    return {
        "ready": len(ready),
        "pending": len(pending),
        "dead_letters": len(dead),
        "latest": len(latest),
    }


def copy_tree(src: Path, dst: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
    return time.perf_counter() - started


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# -- checking what is left --------------------------------------------------------------


def files_left(artifacts: Path) -> set[str]:
    found: set[str] = set()
    for top in os.scandir(artifacts):
        if not top.is_dir() or len(top.name) != 2:
            continue
        for leaf in os.scandir(top.path):
            found.update("sha256:" + e.name for e in os.scandir(leaf.path) if len(e.name) == 64)
    return found


def rows_left(data_dir: Path) -> set[str]:
    conn = sqlite3.connect(data_dir / "store.sqlite3")
    try:
        return {digest for (digest,) in conn.execute("SELECT digest FROM artifacts")}
    finally:
        conn.close()


def check_left(data_dir: Path, referenced: set[str]) -> Json:
    """Exactly the referenced artifacts must be left, as files and as rows."""
    files = files_left(data_dir / "artifacts")
    rows = rows_left(data_dir)
    return {
        "files": len(files),
        "rows": len(rows),
        "referenced": len(referenced),
        "referenced_missing": len(referenced - files) + len(referenced - rows),
        "unreferenced_left": len(files - referenced) + len(rows - referenced),
        "ok": files == referenced and rows == referenced,
    }
