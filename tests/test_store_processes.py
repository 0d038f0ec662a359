"""Several processes and threads on one data directory: each artifact placed once,
never seen half written, and one metadata connection shared by a process's threads.

The processes are spawned and run ``tests/store_helpers.py``.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from pathlib import Path

from mediaflow.store import ArtifactNotFound, ArtifactStore
from tests.store_helpers import digest_of, payload, save_rounds, save_slowly
from tests.store_support import (
    MiB,
    artifact_files,
    row_count,
    temp_files,
)

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
