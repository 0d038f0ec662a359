"""A hypothesis state machine over the store, the queue, keeps, runs and sweeps.

The machine saves a few small payloads (again and again, so grace periods are
refreshed), moves references through the queue (emitted, claimed, acked,
dead-lettered, kept as a latest value), keeps, holds and releases them, pins
the cutoff with an open run, moves a fake clock and sweeps, sometimes under a
disk cap. A Python model of the roots says what every sweep must spare and
what it must take:

- never a rooted artifact (a queued or dead-lettered message's, a latest
  value's, an unexpired keep's; under the cap a recording may go, never a
  message's or a hold's), nor one saved at or after the cutoff (the grace's
  start, or an open run's horizon; under the cap, ``now`` or the horizon);
- after a sweep, nothing unrooted saved before the cutoff is left;
- under the cap, the store ends at or below it, or only protected artifacts
  are left (``over_cap``).
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mediaflow.engine.state_store import StateStore
from mediaflow.gc import SweepReport
from mediaflow.queue import EmissionRun, NewItem, StreamKey, WorkItem
from mediaflow.store import ArtifactNotFound
from mediaflow.store.info import KEEP_KINDS, KeepKind
from tests.gc_helpers import GRACE_S, STREAM, GcEnv, digest_of, open_env, owner_here, ref_payload

# Sizes differ so the cap has choices to make; the alphabet is small so saves repeat.
PAYLOADS = [bytes([65 + i]) * (100 * (i + 1)) for i in range(4)]
DIGESTS = [digest_of(p) for p in PAYLOADS]
SIZES = dict(zip(DIGESTS, (len(p) for p in PAYLOADS), strict=True))
RUNS = ["rec-1", "rec-2"]
LATEST_KEYS = [(STREAM.flow, "cam", "image"), (STREAM.flow, "mic", "audio")]
LONG_AGO_DAYS = 3650.0  # dead letters and run records stay: the model keeps them all
# Where a node forwards references to: always claimed at once (nothing there is
# ever ready, nothing in this flow is parked), so the model knows every entry id.
SINK = StreamKey(STREAM.flow, "sink")

payload_index = st.integers(0, len(PAYLOADS) - 1)
which = st.integers(0, 1000)  # picks one of a changing set, modulo its size


def digest_in(ref: Any) -> str:
    value: str = ref["value"]["$ref"]["digest"]
    return value


class GcMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="gc-props-"))
        self.loop = asyncio.new_event_loop()
        self.env: GcEnv = open_env(self.tmp / "data")
        self.state = StateStore(self.env.data_dir)
        # The model.
        self.saved_at: dict[str, float] = {}  # digest -> latest save, while stored
        self.items: dict[str, str] = {}  # entry id -> digest, ready or pending
        self.pending: dict[str, WorkItem] = {}
        self.dead: list[str] = []
        self.latest: dict[tuple[str, str, str], str] = {}
        self.keeps: dict[tuple[str, str], tuple[str, float | None]] = {}  # -> kind, expiry
        self.pin: tuple[str, float] | None = None  # open run, its horizon
        self.runs = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.env.queue.close())
        self.env.store.close()
        self.state.close()
        self.loop.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def now(self) -> float:
        return self.env.clock()

    # -- what the model says ---------------------------------------------------

    def kept(self, *kinds: str) -> set[str]:
        return {
            digest
            for (_, digest), (kind, expires) in self.keeps.items()
            if kind in kinds and (expires is None or expires > self.now)
        }

    def message_roots(self) -> set[str]:
        return set(self.items.values()) | set(self.dead) | set(self.latest.values())

    def roots(self) -> set[str]:
        return self.message_roots() | self.kept("recording", "hold")

    def cutoff(self, grace_s: float) -> float:
        at = self.now - grace_s
        if self.pin is not None and self.pin[1] < at:
            at = self.pin[1]
        return at

    def on_disk(self) -> dict[str, float]:
        """digest -> saved_at of every row; and every row has its file, and back."""
        rows: dict[str, float] = {}
        if self.env.store.db_path.exists():
            with closing(sqlite3.connect(self.env.store.db_path)) as db:
                rows = dict(db.execute("SELECT digest, saved_at FROM artifacts"))
        files = {d for d in DIGESTS if self.env.store.exists(d)}
        assert set(rows) == files, "a row without its file, or a file without its row"
        return rows

    # -- saving and messages ---------------------------------------------------

    @rule(i=payload_index)
    def save(self, i: int) -> None:
        ref = self.run(self.env.save(PAYLOADS[i]))
        assert self.env.store.exists(ref)
        self.saved_at[ref.digest] = self.now

    @precondition(lambda self: self.saved_at)
    @rule(pick=which)
    def emit(self, pick: int) -> None:
        digest = sorted(self.saved_at)[pick % len(self.saved_at)]
        item = NewItem(STREAM, "emission", ref_payload(digest))
        [stored] = self.run(self.env.queue.commit([item]))
        self.items[stored.entry_id] = digest

    @precondition(lambda self: len(self.pending) < len(self.items))
    @rule()
    def claim(self) -> None:
        [item] = self.run(self.env.queue.claim("viewer-1", {STREAM: 1}))
        assert self.items[item.entry_id] == digest_in(item.payload)
        self.pending[item.entry_id] = item

    @precondition(lambda self: self.pending)
    @rule(pick=which)
    def ack(self, pick: int) -> None:
        entry_id = sorted(self.pending)[pick % len(self.pending)]
        assert self.run(self.env.queue.ack([entry_id])) == 1
        del self.pending[entry_id], self.items[entry_id]

    @precondition(lambda self: self.pending)
    @rule(pick=which)
    def forward(self, pick: int) -> None:
        """A node passes its input's reference on: one commit acks the input and
        journals the output."""
        entry_id = sorted(self.pending)[pick % len(self.pending)]
        digest = self.items[entry_id]
        value = ref_payload(digest)["value"]
        run = EmissionRun(SINK, "viewer.image", "image", [value], self.now, claim=1)
        [out] = self.run(self.env.queue.commit([run], claim_for="viewer-1", ack=[entry_id]))
        assert digest_in(out.payload) == digest
        del self.pending[entry_id], self.items[entry_id]
        self.items[out.entry_id] = digest
        self.pending[out.entry_id] = out

    @precondition(lambda self: self.pending)
    @rule(pick=which)
    def dead_letter(self, pick: int) -> None:
        entry_id = sorted(self.pending)[pick % len(self.pending)]
        self.run(self.env.queue.dead_letter(self.pending.pop(entry_id), "node failed"))
        self.dead.append(self.items.pop(entry_id))

    @rule(key=st.sampled_from(LATEST_KEYS), pick=st.none() | which)
    def put_latest(self, key: tuple[str, str, str], pick: int | None) -> None:
        if pick is None or not self.saved_at:
            self.run(self.env.queue.put_latest({key: {"$ref": None}}))
            self.latest.pop(key, None)
            return
        digest = sorted(self.saved_at)[pick % len(self.saved_at)]
        self.run(self.env.queue.put_latest({key: ref_payload(digest)["value"]}))
        self.latest[key] = digest

    # -- keeps -----------------------------------------------------------------

    @rule(
        run=st.sampled_from(RUNS),
        i=payload_index,
        kind=st.sampled_from(KEEP_KINDS),
        lasts=st.none() | st.sampled_from([1.0, GRACE_S / 2, 3 * GRACE_S]),
    )
    def keep(self, run: str, i: int, kind: KeepKind, lasts: float | None) -> None:
        digest = DIGESTS[i]
        expires = None if lasts is None else self.now + lasts
        if digest not in self.saved_at:
            try:
                self.env.store.keep(run, digest, expires_at=expires, kind=kind)
            except ArtifactNotFound:
                return
            raise AssertionError(f"kept {digest}, which is not stored")
        added = self.env.store.keep(run, digest, expires_at=expires, kind=kind)
        assert added is ((run, digest) not in self.keeps)
        self.keeps[run, digest] = (kind, expires)

    @rule(run=st.sampled_from(RUNS), i=payload_index)
    def unkeep(self, run: str, i: int) -> None:
        had = self.keeps.pop((run, DIGESTS[i]), None) is not None
        assert self.env.store.unkeep(run, DIGESTS[i]) is had

    @rule(run=st.sampled_from(RUNS))
    def release(self, run: str) -> None:
        mine = [key for key in self.keeps if key[0] == run]
        for key in mine:
            del self.keeps[key]
        assert self.env.store.release(run) == len(mine)

    # -- runs in flight, time --------------------------------------------------

    @precondition(lambda self: self.pin is None)
    @rule(back=st.sampled_from([0.0, 10.0, GRACE_S, 3 * GRACE_S]))
    def start_run(self, back: float) -> None:
        self.runs += 1
        run_id = f"run-{self.runs}"
        self.state.start_run(run_id, STREAM.flow, owner_here())
        self.state.heartbeat(run_id, horizon=self.now - back)
        self.pin = (run_id, self.now - back)

    @precondition(lambda self: self.pin is not None)
    @rule()
    def end_run(self) -> None:
        assert self.pin is not None
        self.state.end_run(self.pin[0], "stopped")
        self.pin = None

    @rule(seconds=st.sampled_from([1.0, 60.0, GRACE_S / 2, GRACE_S, 2 * GRACE_S]))
    def advance(self, seconds: float) -> None:
        self.env.clock.advance(seconds)

    # -- sweeps ----------------------------------------------------------------

    def sweep(self, **changes: Any) -> SweepReport:
        report: SweepReport = self.run(
            self.env.sweep(dead_letter_days=LONG_AGO_DAYS, run_record_days=LONG_AGO_DAYS, **changes)
        )
        return report

    @rule()
    def sweep_plain(self) -> None:
        before = self.on_disk()
        roots = self.roots()
        cutoff = self.cutoff(GRACE_S)

        report = self.sweep()

        after = self.on_disk()
        assert report.cutoff == cutoff
        pinned = self.pin is not None and cutoff < self.now - GRACE_S
        assert report.pinned_by == ((self.pin[0],) if self.pin is not None and pinned else ())
        for digest, saved_at in before.items():
            if digest in roots or saved_at >= cutoff:
                assert digest in after, f"swept {digest}: rooted or saved after the cutoff"
            else:
                assert digest not in after, f"left {digest}: unrooted, saved before the cutoff"
        assert report.deleted == len(before) - len(after)
        self.settle(after)

    @rule(cap=st.sampled_from([1, 300, 700, 1500]), cap_only=st.booleans())
    def sweep_capped(self, cap: int, cap_only: bool) -> None:
        before = self.on_disk()
        roots = self.roots()
        protected = self.message_roots() | self.kept("hold")
        grace_cutoff, cap_cutoff = self.cutoff(GRACE_S), self.cutoff(0.0)
        self.env.events.clear()

        report = self.sweep(max_bytes=cap, cap_only=cap_only)

        after = self.on_disk()
        for digest, saved_at in before.items():
            if digest in protected or saved_at >= cap_cutoff:
                assert digest in after, f"evicted {digest}: a message's, a hold's or too new"
            elif digest not in roots and saved_at < grace_cutoff and not cap_only:
                assert digest not in after, f"left {digest}: unrooted, saved before the cutoff"
        stored = sum(SIZES[d] for d in after)
        if report.over_cap:
            assert stored > cap
            # Only what the cap may not take is left.
            assert all(d in protected or after[d] >= cap_cutoff for d in after)
        else:
            assert stored <= cap
        evicted = {e["digest"] for t, e in self.env.events if t == "artifact_evicted"}
        assert evicted <= set(before) - set(after)
        self.settle(after)

    @rule()
    def sweep_dry(self) -> None:
        before = self.on_disk()
        keeps = self.env.store.totals()

        report = self.sweep(dry_run=True)

        assert self.on_disk() == before and self.env.store.totals() == keeps
        unrooted_old = [
            d for d, at in before.items() if d not in self.roots() and at < self.cutoff(GRACE_S)
        ]
        assert report.deleted == len(unrooted_old)

    def settle(self, after: dict[str, float]) -> None:
        """The model after a sweep: expired keeps dropped, evicted ones' keeps with them."""
        self.saved_at = {d: at for d, at in self.saved_at.items() if d in after}
        self.keeps = {
            key: (kind, expires)
            for key, (kind, expires) in self.keeps.items()
            if (expires is None or expires > self.now) and key[1] in after
        }

    @invariant()
    def model_matches_the_store(self) -> None:
        assert self.on_disk().keys() == self.saved_at.keys()
        assert self.env.store.totals().bytes == sum(SIZES[d] for d in self.saved_at)
        for digest in self.saved_at:
            assert self.env.store.is_kept(digest) is (digest in self.kept("recording", "hold"))


GcMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGcStateMachine = GcMachine.TestCase
