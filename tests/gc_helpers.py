"""Shared helpers for the GC tests (``tests/test_gc_*.py``): a fake clock, a data
directory with a real store and a real SQLite queue, and code that spawned
processes run (so it must be importable).

No tests live here; the other modules import what they use.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mediaflow.gc import GcSettings, SweepReport, sweep_artifacts
from mediaflow.media import MediaRef
from mediaflow.queue import NewItem, SqliteQueue, StreamKey, WorkItem
from mediaflow.store import ArtifactStore

OCTETS = "application/octet-stream"
GRACE_S = 3600.0
# Every test starts its fake clock at the real time, so what the store stamps
# with the fake clock and what the queue and the run records stamp with the
# real one (dead letters, heartbeats) are comparable.
STREAM = StreamKey("cams", "viewer")


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class FakeClock:
    """Epoch seconds that move only when told to."""

    def __init__(self, start: float | None = None) -> None:
        self.now = float(int(time.time())) if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def ref_payload(ref: MediaRef | str) -> dict[str, Any]:
    """An emission payload carrying a reference, as the runner journals one."""
    value = ref.to_json() if isinstance(ref, MediaRef) else {"digest": ref}
    return {"src": "cam.image", "port": "image", "value": {"$ref": value}, "at": 0.0}


def settings(**changes: Any) -> GcSettings:
    """Settings for a test: the defaults with an hour's grace, changed as given."""
    return replace(GcSettings(grace_s=GRACE_S), **changes)


def owner_here() -> str:
    """A run owner naming this (live) process."""
    return f"{socket.gethostname()}:{os.getpid()}:x"


def owner_dead() -> str:
    """A run owner naming a process of this host that has exited."""
    code = "import os; print(os.getpid())"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return f"{socket.gethostname()}:{int(child.stdout)}:x"


@dataclass
class GcEnv:
    """A data directory with a store on a fake clock and a real SQLite queue."""

    data_dir: Path
    clock: FakeClock
    store: ArtifactStore
    queue: SqliteQueue
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def save(self, data: bytes, media_type: str = OCTETS) -> MediaRef:
        return await self.store.save(data, media_type)

    def path(self, ref: MediaRef | str) -> Path:
        return self.store.path_for(ref.digest if isinstance(ref, MediaRef) else ref)

    def present(self, ref: MediaRef | str) -> bool:
        """The file is there and so is its row."""
        return self.store.exists(ref) and self.has_row(ref)

    def gone(self, ref: MediaRef | str) -> bool:
        """Neither the file nor the row is left."""
        return not self.store.exists(ref) and not self.has_row(ref)

    def has_row(self, ref: MediaRef | str) -> bool:
        digest = ref.digest if isinstance(ref, MediaRef) else ref
        with closing(sqlite3.connect(self.store.db_path)) as db:
            found = db.execute("SELECT 1 FROM artifacts WHERE digest = ?", (digest,))
            return found.fetchone() is not None

    def keeps(self, ref: MediaRef | str) -> set[tuple[str, str]]:
        """(run id, kind) of every keep row of ``ref``, expired ones included."""
        digest = ref.digest if isinstance(ref, MediaRef) else ref
        with closing(sqlite3.connect(self.store.db_path)) as db:
            found = db.execute("SELECT run_id, kind FROM run_artifact WHERE digest = ?", (digest,))
            return set(found)

    async def emit(self, ref: MediaRef, **options: Any) -> NewItem:
        item = NewItem(STREAM, "emission", ref_payload(ref), **options)
        await self.queue.commit([item])
        return item

    async def claim(self, ref: MediaRef) -> WorkItem:
        """Enqueue an emission carrying ``ref`` and claim it (it is then pending)."""
        [item] = await self.queue.commit(
            [NewItem(STREAM, "emission", ref_payload(ref))], claim_for="viewer-1"
        )
        return item

    async def sweep(self, *, now: float | None = None, **changes: Any) -> SweepReport:
        """One sweep at ``now`` (default: the fake clock), recording its events."""

        def sink(event_type: str, data: Mapping[str, Any]) -> None:
            self.events.append((event_type, dict(data)))

        dry_run = changes.pop("dry_run", False)
        cap_only = changes.pop("cap_only", False)
        return await sweep_artifacts(
            self.data_dir,
            self.queue,
            store=self.store,
            settings=settings(**changes),
            dry_run=dry_run,
            cap_only=cap_only,
            now=self.clock() if now is None else now,
            events=sink,
        )

    def evictions(self) -> list[tuple[str, str]]:
        """(digest, why) of every ``artifact_evicted`` event so far, in order."""
        return [(d["digest"], d["why"]) for t, d in self.events if t == "artifact_evicted"]


def open_env(data_dir: Path, clock: FakeClock | None = None) -> GcEnv:
    clock = clock or FakeClock()
    return GcEnv(
        data_dir, clock, ArtifactStore(data_dir, clock=clock), SqliteQueue.in_dir(data_dir)
    )


async def close_env(env: GcEnv) -> None:
    await env.queue.close()
    env.store.close()


# -- code run by spawned processes ------------------------------------------------------


def sweep_in_process(data_dir: str, signals: str, out: str) -> None:
    """Sweep ``data_dir`` (grace 0) and write the outcome to ``out`` as JSON.

    A sweep that gets the directory announces it (``<signals>/in``) at its
    first progress call and waits there for ``<signals>/go``, so the test can
    hold it open while the other process tries.
    """
    from mediaflow.gc import SweepBusy

    marks = Path(signals)
    waited = False

    def hold(_: object) -> None:
        nonlocal waited
        if waited:
            return
        waited = True
        (marks / "in").write_text(str(os.getpid()))
        deadline = time.monotonic() + 30
        while not (marks / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    async def main() -> dict[str, Any]:
        queue = SqliteQueue.in_dir(Path(data_dir))
        try:
            report = await sweep_artifacts(
                Path(data_dir), queue, settings=GcSettings(grace_s=0.0), progress=hold
            )
        except SweepBusy as exc:
            return {"busy": True, "message": str(exc)}
        finally:
            await queue.close()
        return {"busy": False, "deleted": report.deleted, "live": report.live_digests}

    Path(out).write_text(json.dumps(asyncio.run(main())))


def run_async(coro: Any) -> Any:
    """Run ``coro`` on a fresh loop (for synchronous callers: threads, hypothesis)."""
    return asyncio.run(coro)
