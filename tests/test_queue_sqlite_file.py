"""The SQLite queue's own promises about its file: WAL with normal sync, background
checkpoints, where ``open_queue`` puts it, and errors that name it.

Other processes on the same file: ``tests/test_queue_sqlite_processes.py``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from mediaflow.config import sqlite_sync
from mediaflow.queue import (
    EmissionRun,
    NewItem,
    QueueError,
    QueueUnavailable,
    SqliteQueue,
    open_queue,
)
from tests.queue_sqlite_helpers import (
    A,
    B,
    let_checkpoint_finish,
    queue_fixture,  # noqa: F401 - the queue fixture
)

# -- the file ------------------------------------------------------------------


async def test_file_is_in_wal_mode_with_normal_sync(queue: SqliteQueue) -> None:
    await queue.commit([NewItem(A, "emission", {})])
    conn = sqlite3.connect(queue.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert queue._db.connection.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


async def test_sync_full_on_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAFLOW_SQLITE_SYNC", "full")
    q = SqliteQueue(tmp_path / "queue.sqlite3", synchronous=sqlite_sync())
    assert q._db.connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    await q.close()
    monkeypatch.setenv("MEDIAFLOW_SQLITE_SYNC", "sometimes")
    with pytest.raises(QueueError, match="MEDIAFLOW_SQLITE_SYNC"):
        SqliteQueue(tmp_path / "queue.sqlite3", synchronous=sqlite_sync())


async def test_background_checkpoints_keep_the_wal_small(queue: SqliteQueue) -> None:
    # How far the WAL grows while a checkpoint's fsyncs run depends on the disk
    # (a CI run saw 15 MB when they took seconds); this test is about the logic,
    # so it lets each background copy finish, as a fast disk would, before going on.
    # The RESTART after it and the WAL starting over are the queue's own doing.
    for i in range(3000):
        [item] = await queue.commit([NewItem(A, "emission", {"i": i})], claim_for="c")
        await queue.ack([item.entry_id])
        await let_checkpoint_finish(queue)

    wal = queue.path.with_name(queue.path.name + "-wal")
    # Without checkpoints: 6000 commits of 2 KiB pages, over 20 MB. With them the
    # WAL starts over every CHECKPOINT_EVERY (500) commits: about 3 MB.
    assert wal.stat().st_size < 5_000_000


@pytest.mark.parametrize(
    ("setting", "where"),
    [
        (None, "data/queue.sqlite3"),
        ("", "data/queue.sqlite3"),
        ("sqlite", "data/queue.sqlite3"),
        ("sqlite://", "data/queue.sqlite3"),
        ("sqlite://elsewhere.db", "data/elsewhere.db"),
        ("sqlite:///ABS/q.db", "abs/q.db"),
        ("sqlite:///ABS", "abs/queue.sqlite3"),  # an existing directory
    ],
)
async def test_open_queue_settings(tmp_path: Path, setting: str | None, where: str) -> None:
    (tmp_path / "abs").mkdir()
    if setting is not None:
        setting = setting.replace("/ABS", str(tmp_path / "abs"))

    q = open_queue(setting, tmp_path / "data")

    assert isinstance(q, SqliteQueue)
    assert q.path == tmp_path / where
    await q.close()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("postgres://x", "'postgres://x' is not a queue .*expected 'sqlite'"),
        ("sqlite:/x", "'sqlite:/x' is not a queue"),
    ],
)
def test_open_queue_refuses(tmp_path: Path, setting: str, message: str) -> None:
    with pytest.raises(QueueError, match=f"MEDIAFLOW_QUEUE={message}"):
        open_queue(setting, tmp_path)


@pytest.mark.parametrize(
    ("setting", "url", "prefix"),
    [
        ("redis://localhost:6379/0", "redis://localhost:6379/0", "mediaflow"),
        ("redis://h:1/2?prefix=site-a", "redis://h:1/2", "site-a"),
        (
            "rediss://u:pw@h:1/0?ssl_cert_reqs=none&prefix=b",
            "rediss://u:pw@h:1/0?ssl_cert_reqs=none",
            "b",
        ),
        ("unix:///run/redis.sock?db=1", "unix:///run/redis.sock?db=1", "mediaflow"),
    ],
)
async def test_open_queue_opens_redis_with_its_prefix(
    tmp_path: Path, setting: str, url: str, prefix: str
) -> None:
    from mediaflow.queue.redis.queue import RedisQueue

    q = open_queue(setting, tmp_path)

    assert isinstance(q, RedisQueue) and (q.url, q.prefix) == (url, prefix)
    assert "pw" not in repr(q)
    await q.close()
    assert not (tmp_path / "queue.sqlite3").exists()


def test_a_redis_setting_without_redis_py_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "redis" else real(name, *a)
    )
    with pytest.raises(QueueError, match=r"pip install 'mediaflow\[redis\]'"):
        open_queue("redis://localhost:6379/0", tmp_path)
    with pytest.raises(QueueError, match="prefix must not be empty"):
        monkeypatch.undo()
        open_queue("redis://localhost:6379/0?prefix=", tmp_path)


# -- errors --------------------------------------------------------------------


def test_a_corrupt_file_is_unavailable_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    path.write_bytes(b"this is not a database, just some bytes " * 100)

    with pytest.raises(QueueUnavailable, match=r"queue\.sqlite3.*not a database"):
        SqliteQueue(path)


def test_a_directory_in_the_way_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "queue.sqlite3").mkdir()
    with pytest.raises(QueueUnavailable, match=r"queue\.sqlite3"):
        SqliteQueue(tmp_path / "queue.sqlite3")


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(QueueUnavailable, match="schema 99 is newer"):
        SqliteQueue(path)


async def test_a_full_disk_is_unavailable_and_leaves_the_queue_intact(
    queue: SqliteQueue,
) -> None:
    await queue.commit([NewItem(A, "emission", {"n": 0})])
    pages = queue._db.connection.execute("PRAGMA page_count").fetchone()[0]
    queue._db.connection.execute(f"PRAGMA max_page_count = {pages}")  # the "disk" is full

    with pytest.raises(QueueUnavailable, match="disk full"):
        await queue.commit([NewItem(A, "emission", {"big": "x" * 100_000})])

    queue._db.connection.execute("PRAGMA max_page_count = 1073741823")
    [item] = await queue.commit([NewItem(A, "emission", {"n": 1})])
    assert item.seq == 2  # the failed enqueue left no trace


async def test_a_commit_on_a_full_disk_writes_nothing(queue: SqliteQueue) -> None:
    [held] = await queue.commit([NewItem(A, "emission", {"n": 0})], claim_for="c")
    pages = queue._db.connection.execute("PRAGMA page_count").fetchone()[0]
    queue._db.connection.execute(f"PRAGMA max_page_count = {pages}")

    big = EmissionRun(B, "up.out", "in", [{"big": "x" * 100_000}] * 3, 0.5, claim=3)
    with pytest.raises(QueueUnavailable, match="disk full"):
        await queue.commit(
            [big], claim_for="c", ack=[held.entry_id], latest={("f", "up", "out"): 1}
        )

    queue._db.connection.execute("PRAGMA max_page_count = 1073741823")
    assert await queue.touch("c", [held.entry_id]) == 1  # not acked
    assert await queue.latest("f") == {}
    [item] = await queue.commit([EmissionRun(B, "up.out", "in", [1], 0.5, claim=1)], claim_for="c")
    assert item.seq == 1  # the failed commit left no trace
    assert (await queue.stats()).acked == 0


async def test_committed_rows_are_the_rows_enqueue_writes(queue: SqliteQueue) -> None:
    """Column by column, bar the id: the same payload JSON (decoded), state, holder,
    deliveries and times as enqueue's rows for the same payloads and claims."""
    values: list[Any] = [{"n": 0}, 1 / 3, "text", True, None, [1.5, {"x": 2**70}]]
    at = time.time() + 1e-7
    await queue.commit([EmissionRun(A, "up.out", "in", values, at, claim=4)], claim_for="me")
    await queue.commit(
        [
            NewItem(
                B, "emission", {"src": "up.out", "port": "in", "value": v, "at": at}, claim=i < 4
            )
            for i, v in enumerate(values)
        ],
        claim_for="me",
    )

    conn = sqlite3.connect(queue.path)
    rows = conn.execute(
        "SELECT id, kind, payload, state, available_at, consumer, touched_at IS NULL, "
        "touched_at = enqueued_at, deliveries FROM items ORDER BY id"
    ).fetchall()
    conn.close()

    decoded = [(kind, json.loads(p), *rest) for _, kind, p, *rest in rows]
    committed, enqueued = decoded[: len(values)], decoded[len(values) :]
    assert committed == enqueued
    assert [row[1]["value"] for row in committed] == values
    assert {row[1]["at"] for row in committed} == {at}
    assert [row[2] for row in committed] == [1, 1, 1, 1, 0, 0]  # states


async def test_a_closed_queue_says_so(queue: SqliteQueue) -> None:
    await queue.close()
    with pytest.raises(QueueError, match="closed"):
        await queue.stats()
