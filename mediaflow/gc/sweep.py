"""``sweep_artifacts``: delete exactly what nothing needs, and hold the store under its cap.

One sweep, in order:

1. Read the pins: every open run whose process may be alive, with its horizon
   (:mod:`mediaflow.gc.plan`); choose the cutoff from them and the grace.
2. Note the recordings whose keep ran out (``retention_days``), then drop
   every expired keep.
3. Read the live set: every digest a queued, claimed, parked or
   dead-lettered item or a latest value holds, from one snapshot of the queue
   backend (:meth:`~mediaflow.queue.contract.Retention.live_digests`), into a
   table on disk.
4. Adopt stray files and remove stale temp files (:mod:`mediaflow.gc.orphans`).
5. Delete every artifact saved before the cutoff that no
   unexpired keep and no live message holds, in batches that hold savers off.
6. Over the cap: evict kept recordings, oldest first, then unreferenced
   artifacts saved before the pins (the grace no longer protects them), never
   a live message's artifact, a hold, or one a response is sending. Still over:
   ``store_over_cap``.
7. Trim dead letters and old run records; add the totals to the store's counters.

Only one sweep runs per data directory at a time (``<data>/gc.lock``), across
processes: a second one raises :class:`SweepBusy`. A dry run takes no lock and
changes nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mediaflow.engine.ownership import owner_alive
from mediaflow.engine.state_store import StateStore
from mediaflow.eventloop import run_blocking
from mediaflow.gc.gcdb import BATCH, BATCH_GAP_S, Candidate, GcDb
from mediaflow.gc.orphans import adopt_strays, sweep_temp
from mediaflow.gc.plan import Cutoff, Pin, cap_excess, choose_cutoff
from mediaflow.gc.settings import GcSettings
from mediaflow.queue.contract import Retention
from mediaflow.store import ArtifactStore
from mediaflow.store.locks import Busy, exclusive_or_busy
from mediaflow.store.metadata import SweepWork

EventSink = Callable[[str, Mapping[str, Any]], None]
DAY_S = 86400.0


class SweepBusy(Exception):
    """Another sweep holds this data directory."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(f"another sweep is running on {data_dir}")
        self.data_dir = data_dir


@dataclass(frozen=True)
class SweepProgress:
    """Where a sweep is: ``phase`` (``live``, ``strays``, ``collect``, ``cap``), how many
    it has looked at in that phase, and what it has freed so far."""

    phase: str
    done: int
    freed_bytes: int


@dataclass
class SweepReport:
    """What a sweep found and did (with ``dry_run``: what it would do). Times are epoch s."""

    started_at: float
    dry_run: bool
    cutoff: float
    pinned_by: tuple[str, ...] = ()
    duration_s: float = 0.0
    live_digests: int = 0
    examined: int = 0
    deleted: int = 0
    freed_bytes: int = 0
    evicted: int = 0
    evicted_bytes: int = 0
    keeps_expired: int = 0
    orphans_adopted: int = 0
    temp_removed: int = 0
    skipped_sending: int = 0
    stored_bytes: int = 0
    stored_count: int = 0
    max_bytes: int | None = None
    over_cap: bool = False
    dead_letters_trimmed: int = 0
    runs_pruned: int = 0
    retention: set[str] = field(default_factory=set, repr=False)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        del body["retention"]
        body["pinned_by"] = list(self.pinned_by)
        return body


T = TypeVar("T")


class _Stopped(Exception):
    """A sweep step gave up between batches: its caller was cancelled."""


async def sweep_artifacts(
    data_dir: Path,
    queue: Retention,
    *,
    store: ArtifactStore | None = None,
    settings: GcSettings | None = None,
    dry_run: bool = False,
    cap_only: bool = False,
    now: float | None = None,
    progress: Callable[[SweepProgress], None] | None = None,
    events: EventSink | None = None,
) -> SweepReport:
    """Sweep ``data_dir``'s store once; see the module docstring for the steps.

    ``settings`` None means the built-in :class:`GcSettings` (the environment is
    read at the process boundary, :meth:`GcSettings.from_env`, not here).

    ``cap_only`` skips everything but the cap (the watcher's frequent pass).
    ``now`` defaults to the store's clock. ``progress`` and ``events`` are
    called from worker threads (hop to a loop with ``call_soon_threadsafe``).
    The blocking work runs in worker threads, one at a time; cancelling stops
    the sweep between batches. Raises :class:`SweepBusy`,
    :class:`~mediaflow.queue.contract.QueueUnavailable`, ``sqlite3.Error`` or
    ``OSError``.
    """
    data_dir = Path(data_dir)
    owned = store is None
    target = store if store is not None else ArtifactStore(data_dir)
    try:
        with _sweep_lock(data_dir, dry_run):
            sweep = _Sweep(
                data_dir,
                queue,
                target,
                settings or GcSettings(),
                dry_run=dry_run,
                now=target.clock() if now is None else now,
                progress=progress,
                events=events,
            )
            return await sweep.run(cap_only=cap_only)
    except Busy:  # only the lock raises it
        raise SweepBusy(data_dir) from None
    finally:
        if owned:
            target.close()


def _sweep_lock(data_dir: Path, dry_run: bool) -> AbstractContextManager[None]:
    """``<data>/gc.lock``, held for the sweep (a dry run changes nothing: no lock)."""
    if dry_run:
        return nullcontext()
    data_dir.mkdir(parents=True, exist_ok=True)
    return exclusive_or_busy(data_dir / "gc.lock")


def read_pins(data_dir: Path, lease_s: float) -> list[Pin]:
    """Open runs whose process may be alive, with their horizons. Blocking."""
    if not (data_dir / "state.sqlite3").exists():
        return []
    state = StateStore(data_dir)
    try:
        runs = state.open_runs()
    finally:
        state.close()
    return [
        Pin(run.run_id, run.flow, run.horizon if run.horizon is not None else run.started_at)
        for run in runs
        if owner_alive(run.owner, run.heartbeat_at, lease_s)
    ]


class _Sweep:
    """One sweep's state; the steps are methods, in the order :meth:`run` calls them."""

    def __init__(
        self,
        data_dir: Path,
        queue: Retention,
        store: ArtifactStore,
        settings: GcSettings,
        *,
        dry_run: bool,
        now: float,
        progress: Callable[[SweepProgress], None] | None,
        events: EventSink | None,
    ) -> None:
        self.data_dir = data_dir
        self.queue = queue
        self.store = store
        self.settings = settings
        self.dry_run = dry_run
        self.now = now
        self._progress = progress
        self._events = events
        self._last_progress = 0.0
        self._done: dict[str, int] = {}
        self.report = SweepReport(now, dry_run, now - settings.grace_s)
        self._stop = threading.Event()  # set when the sweep is cancelled
        self.report.max_bytes = settings.max_bytes

    async def _blocking(self, fn: Callable[..., T], /, *args: Any) -> T:
        return await run_blocking(fn, *args, stop=self._stop)

    async def run(self, *, cap_only: bool) -> SweepReport:
        started = time.monotonic()
        lease_s = self.settings.lease_ms / 1000
        pins = await self._blocking(read_pins, self.data_dir, lease_s)
        cutoff = choose_cutoff(self.now, self.settings.grace_s, pins)
        self.report.cutoff, self.report.pinned_by = cutoff.at, cutoff.pinned_by
        await self._blocking(self.store.total_bytes)  # creates or migrates the schema
        db = await self._blocking(GcDb, self.store.db_path)
        try:
            await self._blocking(self._expire_keeps, db, cutoff)
            await self._read_live(db)
            if not cap_only:
                await self._blocking(self._clean_orphans, db)
                await self._blocking(self._collect, db, cutoff)
            await self._blocking(self._enforce_cap, db, choose_cutoff(self.now, 0.0, pins))
        finally:
            await self._blocking(db.close)
        if not cap_only and not self.dry_run:
            await self._trim_records()
        totals = await self._blocking(self.store.totals)
        self.report.stored_bytes, self.report.stored_count = totals.bytes, totals.count
        self.report.duration_s = time.monotonic() - started
        if not self.dry_run:
            await self._blocking(self._count)
        return self.report

    # -- steps ---------------------------------------------------------------

    def _expire_keeps(self, db: GcDb, cutoff: Cutoff) -> None:
        self.report.retention = db.expired_recordings(self.now)
        self.report.keeps_expired = db.expired_keeps(self.now, cutoff.at, drop=not self.dry_run)

    async def _read_live(self, db: GcDb) -> None:
        async for batch in self.queue.live_digests():
            await self._blocking(db.add_live, batch)
            self._tell("live", len(batch))
        self.report.live_digests = await self._blocking(db.live_count)

    def _clean_orphans(self, db: GcDb) -> None:
        if not self.dry_run:
            _, self.report.orphans_adopted = adopt_strays(db, self.store)
        self.report.temp_removed = sweep_temp(
            self.store, self.settings.temp_age_s, dry_run=self.dry_run
        )

    def _collect(self, db: GcDb, cutoff: Cutoff) -> None:
        for batch in _batches(db.unreferenced(cutoff.at, self.now)):
            gone = self._delete(db, batch, cutoff.at, recordings=False)
            self.report.deleted += len(gone)
            self.report.freed_bytes += sum(c.size for c in gone)
            for victim in gone:
                if victim.digest in self.report.retention:
                    self._event("artifact_evicted", victim, "retention")
            self._tell("collect", len(batch))

    def _enforce_cap(self, db: GcDb, cap_cutoff: Cutoff) -> None:
        stored = self.store.total_bytes()
        if self.dry_run:
            stored -= self.report.freed_bytes  # what the collect step would have freed
        excess = cap_excess(stored, self.settings.max_bytes)
        if excess <= 0:
            return
        for recordings, pages in (
            (True, db.recordings(cap_cutoff.at, self.now)),
            (False, db.candidates(cap_cutoff.at, self.now)),
        ):
            for batch in _batches(pages):
                if excess <= 0:
                    break
                if self.dry_run and not recordings:
                    # Counted by the collect step already: the grace does not protect them.
                    batch = [c for c in batch if c.saved_at >= self.report.cutoff]
                # A victim may be skipped (being sent): take the next ones of the batch.
                while batch and excess > 0:
                    taken = _enough(batch, excess)
                    batch = batch[len(taken) :]
                    gone = self._delete(db, taken, cap_cutoff.at, recordings=recordings)
                    excess -= sum(c.size for c in gone)
                    self.report.evicted += len(gone)
                    self.report.evicted_bytes += sum(c.size for c in gone)
                    self.report.freed_bytes += sum(c.size for c in gone)
                    for victim in gone:
                        self._event("artifact_evicted", victim, "cap")
                    self._tell("cap", len(taken))
        if excess > 0:
            self.report.over_cap = True
            if self._events is not None:
                self._events(
                    "store_over_cap",
                    {
                        "stored_bytes": stored if self.dry_run else self.store.total_bytes(),
                        "max_bytes": self.settings.max_bytes,
                        "live_bytes": db.protected_bytes(self.now),
                    },
                )

    def _delete(
        self, db: GcDb, batch: list[Candidate], cutoff: float, *, recordings: bool
    ) -> list[Candidate]:
        if self._stop.is_set():
            raise _Stopped
        self.report.examined += len(batch)
        if self.dry_run:
            return batch
        done = db.delete(self.store, batch, cutoff=cutoff, now=self.now, recordings=recordings)
        self.report.skipped_sending += done.skipped_sending
        time.sleep(BATCH_GAP_S)  # on a worker thread (see run)
        return done.digests

    async def _trim_records(self) -> None:
        settings = self.settings
        self.report.dead_letters_trimmed = await self.queue.trim_dead_letters(
            before=self.now - settings.dead_letter_days * DAY_S,
            keep_per_flow=settings.dead_letter_keep,
        )
        self.report.runs_pruned = await self._blocking(self._prune_runs)

    def _prune_runs(self) -> int:
        if not (self.data_dir / "state.sqlite3").exists():
            return 0
        state = StateStore(self.data_dir)
        try:
            return state.prune_runs(
                ended_before=self.now - self.settings.run_record_days * DAY_S,
                keep_per_flow=self.settings.run_record_keep,
            )
        finally:
            state.close()

    def _count(self) -> None:
        report = self.report
        self.store.add_gc_counters(
            SweepWork(
                deleted=report.deleted,
                freed_bytes=report.freed_bytes,
                evicted=report.evicted,
                evicted_bytes=report.evicted_bytes,
                swept_at=report.started_at,
                took_s=report.duration_s,
            )
        )

    # -- telling -------------------------------------------------------------

    def _event(self, event_type: str, victim: Candidate, why: str) -> None:
        if self._events is not None:
            self._events(event_type, {"digest": victim.digest, "bytes": victim.size, "why": why})

    def _tell(self, phase: str, count: int) -> None:
        if self._progress is None:
            return
        done = self._done[phase] = self._done.get(phase, 0) + count
        now = time.monotonic()
        if now - self._last_progress >= 0.5:
            self._last_progress = now
            self._progress(SweepProgress(phase, done, self.report.freed_bytes))


def _batches(pages: Iterator[list[Candidate]]) -> Iterator[list[Candidate]]:
    for page in pages:
        for start in range(0, len(page), BATCH):
            yield page[start : start + BATCH]


def _enough(batch: list[Candidate], excess: int) -> list[Candidate]:
    """The oldest of ``batch`` whose sizes add up to ``excess`` (all of it if they don't)."""
    taken: list[Candidate] = []
    total = 0
    for candidate in batch:
        if total >= excess:
            break
        taken.append(candidate)
        total += candidate.size
    return taken
