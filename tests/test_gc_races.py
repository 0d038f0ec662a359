"""Sweeps racing what they must not break: saves of the same bytes in other threads,
a second sweeping process, a ranged download through the real HTTP server, and
a save landing between the cap's choice of a recording and its deletion.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import socket
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path

import pytest

from mediaflow.gc import GcSettings, SweepReport, sweep_artifacts
from mediaflow.gc.gcdb import Candidate, Deleted, GcDb
from mediaflow.queue import SqliteQueue
from mediaflow.store import ArtifactStore
from tests.gc_helpers import (
    OCTETS,
    GcEnv,
    close_env,
    open_env,
    sweep_in_process,
)
from tests.http_support import (
    HOST,
    random_bytes,
    serve,
    settings_for,
    transfer_path_fixture,  # noqa: F401 - the transfer_path fixture
)
from tests.store_helpers import chunks

MiB = 1 << 20
NO_GRACE = GcSettings(grace_s=0.0)


def files_and_rows(data_dir: Path) -> tuple[set[str], set[str]]:
    store = ArtifactStore(data_dir)
    try:
        files = {
            "sha256:" + p.name
            for p in store.artifacts_dir.glob("??/??/*")
            if p.is_file() and len(p.name) == 64
        }
    finally:
        store.close()
    with closing(sqlite3.connect(data_dir / "store.sqlite3")) as db:
        rows = {d for (d,) in db.execute("SELECT digest FROM artifacts")}
    return files, rows


# -- saves against sweeps ----------------------------------------------------------------


class StampingClock:
    """The real time, remembering per thread the last stamp it gave (a save's ``saved_at``)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self) -> float:
        now = time.time()
        self._local.stamp = now
        return now

    @property
    def stamp(self) -> float:
        stamp: float = self._local.stamp
        return stamp


@pytest.mark.parametrize("sweeper_store", ["shared", "own"])
def test_a_save_racing_sweeps_always_ends_with_the_artifact_present(
    tmp_path: Path, sweeper_store: str
) -> None:
    """Savers in 6 threads save 4 payloads over and over (buffers, which skip the
    write when the file is there, and chunks, which always write and link) while
    another thread sweeps with no grace at all. A save's artifact may go only in
    a sweep whose ``now`` is later than its ``saved_at``; one whose save was
    stamped after the last sweep started is there at the end."""
    data_dir = tmp_path / "data"
    clock = StampingClock()
    store = ArtifactStore(data_dir, clock=clock)
    payloads = [random_bytes(64 * 1024, seed=i) for i in range(4)]
    sweep_starts: list[float] = []
    reports: list[SweepReport] = []
    lost: list[str] = []
    errors: list[BaseException] = []
    last_stamp: dict[str, float] = {}
    guard = threading.Lock()
    stop = threading.Event()

    def failing_the_test(work: Callable[..., None]) -> Callable[..., None]:
        def run(*args: object) -> None:
            try:
                work(*args)
            except BaseException as exc:
                errors.append(exc)
                stop.set()

        return run

    @failing_the_test
    def save_over_and_over(worker: int) -> None:
        for n in range(10_000):
            if stop.is_set():
                return
            data = payloads[(worker + n) % len(payloads)]
            source = data if n % 2 else chunks(data, 16 * 1024)
            ref = store.save_sync(source, OCTETS)
            stamp = clock.stamp
            if not (store.exists(ref) and store.stat(ref) is not None):
                with guard:
                    if not any(start > stamp for start in sweep_starts):
                        lost.append(f"{ref.digest} saved at {stamp} gone")
            with guard:
                last_stamp[ref.digest] = max(stamp, last_stamp.get(ref.digest, 0.0))

    @failing_the_test
    def sweep_over_and_over() -> None:
        loop = asyncio.new_event_loop()
        queue = SqliteQueue.in_dir(data_dir)
        own = ArtifactStore(data_dir) if sweeper_store == "own" else store
        try:
            while not stop.is_set():
                with guard:
                    now = time.time()
                    sweep_starts.append(now)
                report = loop.run_until_complete(
                    sweep_artifacts(data_dir, queue, store=own, settings=NO_GRACE, now=now)
                )
                reports.append(report)
        finally:
            loop.run_until_complete(queue.close())
            loop.close()
            if own is not store:
                own.close()

    store.save_sync(b"prepared", OCTETS)
    threads = [threading.Thread(target=save_over_and_over, args=(i,)) for i in range(6)]
    threads.append(threading.Thread(target=sweep_over_and_over))
    for thread in threads:
        thread.start()
    # Race for 1.5 s at least, and on a slow machine until five sweeps have run
    # and one of them deleted something.
    started = time.monotonic()
    while not stop.is_set() and time.monotonic() - started < 60:
        done = list(reports)
        if time.monotonic() - started >= 1.5 and len(done) >= 5 and any(r.deleted for r in done):
            break
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(30)
    store.close()

    assert errors == []
    assert lost == []
    assert len(reports) >= 5 and sum(r.deleted for r in reports) > 0, "the race never ran"
    survivors = {d for d, stamp in last_stamp.items() if stamp > sweep_starts[-1]}
    files, rows = files_and_rows(data_dir)
    assert survivors <= files
    assert files == rows  # no row without its file, no file without its row


# -- two sweeping processes ----------------------------------------------------------------


async def test_two_sweeping_processes_one_sweeps_the_other_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    signals = tmp_path / "signals"
    signals.mkdir()
    env = open_env(data_dir)
    try:
        loose = [await env.save(random_bytes(4096, seed=i)) for i in range(20)]
        queued = [await env.save(random_bytes(4096, seed=100 + i)) for i in range(5)]
        for ref in queued:
            await env.emit(ref)
        kept = await env.save(random_bytes(4096, seed=200))
        env.store.keep("rec-1", kept.digest)
    finally:
        await close_env(env)

    ctx = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"out-{i}.json" for i in range(2)]
    procs = [
        ctx.Process(target=sweep_in_process, args=(str(data_dir), str(signals), str(out)))
        for out in outs
    ]
    for proc in procs:
        proc.start()
    try:
        # One process holds the directory (waiting in its first progress call); the
        # other must give up on its own, before the first is let go.
        deadline = time.monotonic() + 60
        while not (signals / "in").exists() or all(p.exitcode is None for p in procs):
            assert time.monotonic() < deadline, "the sweeping processes did not meet"
            await asyncio.sleep(0.02)
        (signals / "go").touch()
        for proc in procs:
            await asyncio.to_thread(proc.join, 60)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
    assert [p.exitcode for p in procs] == [0, 0]

    results = sorted((json.loads(out.read_text()) for out in outs), key=lambda r: r["busy"])
    assert [r["busy"] for r in results] == [False, True]
    assert results[0]["deleted"] == len(loose)
    assert results[1]["message"] == f"another sweep is running on {data_dir}"
    files, rows = files_and_rows(data_dir)
    assert files == rows == {r.digest for r in [*queued, kept]}


# -- a sweep during a download -------------------------------------------------------------


@pytest.fixture
async def queue_of(tmp_path: Path) -> AsyncIterator[SqliteQueue]:
    queue = SqliteQueue.in_dir(tmp_path)
    yield queue
    await queue.close()


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers


@pytest.fixture
def slow_socket() -> Iterator[socket.socket]:
    """A client socket with a small receive buffer: the server cannot run far ahead."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    sock.setblocking(False)
    yield sock
    sock.close()


async def test_a_sweep_during_a_ranged_download_leaves_it_whole(
    tmp_path: Path,
    queue_of: SqliteQueue,
    slow_socket: socket.socket,
    transfer_path: str,
) -> None:
    data = random_bytes(24 * MiB, seed=7)
    first, last = 1000, len(data) - 1001
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        ref = await served.state.store.save(data, "video/mp4")
        loop = asyncio.get_running_loop()
        await loop.sock_connect(slow_socket, (HOST, served.port))
        reader, writer = await asyncio.open_connection(sock=slow_socket, limit=256 * 1024)
        writer.write(
            f"GET /artifacts/{ref.digest} HTTP/1.1\r\nHost: {HOST}\r\n"
            f"Range: bytes={first}-{last}\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        status, headers = await read_head(reader)
        assert status == 206
        assert headers["content-range"] == f"bytes {first}-{last}/{len(data)}"
        body = bytearray(await reader.readexactly(256 * 1024))

        during = await sweep_artifacts(tmp_path, queue_of, settings=NO_GRACE, now=time.time() + 1)

        assert during.skipped_sending >= 1 and during.deleted == 0
        assert served.state.store.exists(ref)
        while len(body) < last - first + 1:
            piece = await reader.read(1 * MiB)
            assert piece, "the response ended early"
            body += piece
        writer.close()
        assert bytes(body) == data[first : last + 1]

        # Once the response is done, the next sweep takes the artifact.
        deadline = loop.time() + 30
        while True:
            after = await sweep_artifacts(
                tmp_path, queue_of, settings=NO_GRACE, now=time.time() + 1
            )
            if after.deleted == 1 or loop.time() > deadline:
                break
            await asyncio.sleep(0.05)
        assert (after.deleted, after.skipped_sending) == (1, 0)
        assert not served.state.store.exists(ref)


# -- a save between the cap's choice and its deletion --------------------------------------


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[GcEnv]:
    opened = open_env(tmp_path / "data")
    yield opened
    await close_env(opened)


@pytest.mark.parametrize("save_first", [True, False], ids=["saved-again", "untouched"])
async def test_a_recording_saved_again_while_the_cap_takes_it_keeps_its_keep(
    env: GcEnv, monkeypatch: pytest.MonkeyPatch, save_first: bool
) -> None:
    """The cap chose a recording; before its batch runs, a node saves the same bytes
    (a still scene) and a viewer's frame is emitted with it. The batch must leave
    both the artifact and its keep, not drop the keep and then find the row fresh."""
    data = b"a clip whose bytes come round again" * 100
    clip = await env.save(data)
    env.store.keep("rec-1", clip.digest)
    env.clock.advance(10)
    real_delete = GcDb.delete

    def delete_after_a_save(
        self: GcDb,
        store: ArtifactStore,
        victims: Sequence[Candidate],
        *,
        cutoff: float,
        now: float,
        recordings: bool = False,
    ) -> Deleted:
        if save_first:
            store.save_sync(data, OCTETS)  # saved_at = the sweep's now: not before its cutoff
        return real_delete(self, store, victims, cutoff=cutoff, now=now, recordings=recordings)

    monkeypatch.setattr(GcDb, "delete", delete_after_a_save)

    report = await env.sweep(max_bytes=1)

    if save_first:
        assert env.present(clip) and env.keeps(clip) == {("rec-1", "recording")}
        assert report.over_cap and report.evicted == 0
    else:
        assert env.gone(clip) and env.keeps(clip) == set()
        assert report.evicted == 1
