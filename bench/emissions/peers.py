"""Peers and ceilings for :mod:`bench.emissions`, each measured in its own child process.

* Pipecat: the same two-stage pipeline (a source processor pushing N small
  frames, one trivial consumer processor), in memory, no durability,
  observers, RTVI, turn tracking, metrics and idle timeout off. For reference
  also the frames entering through ``PipelineWorker.queue_frame`` (the
  worker's push queue and pipeline source, then the one processor, then the
  worker's sink): Pipecat's rate depends a lot on the pipeline's shape.
* ``asyncio.Queue``: a producer task hands N small dicts to a consumer task
  through a queue bounded like a mediaflow node's line (64): the in-memory
  ceiling for a hand-off between two coroutines.
* Raw SQLite (WAL, ``synchronous=NORMAL``, stdlib ``sqlite3``): single-row
  INSERT transactions per second, and claim+ack per second with batches of
  256 (``UPDATE ... RETURNING`` in one transaction, ``DELETE`` of the same ids
  in another): what the disk and SQLite allow a durable queue on this machine.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._lib.common import Json, Watchdog, best_and_median, run_async

CLAIM_BATCH = 256
ASYNCIO_QUEUE_SIZE = 256  # mediaflow's default MEDIAFLOW_NODE_BUFFER

SQLITE_SCHEMA = """
CREATE TABLE q (
    id INTEGER PRIMARY KEY,
    payload TEXT NOT NULL,
    state INTEGER NOT NULL,
    consumer TEXT,
    touched_at REAL,
    enqueued_at REAL NOT NULL
);
CREATE INDEX q_ready ON q (id) WHERE state = 0;
"""
INSERT_SQL = "INSERT INTO q (payload, state, enqueued_at) VALUES (?, 0, ?)"
CLAIM_SQL = (
    "UPDATE q SET state = 1, consumer = ?, touched_at = ? WHERE id IN "
    "(SELECT id FROM q WHERE state = 0 ORDER BY id LIMIT ?) RETURNING id, payload"
)
ACK_SQL = "DELETE FROM q WHERE id = ?"


# -- asyncio.Queue ------------------------------------------------------------------


async def _consume(value: dict[str, int]) -> None:
    """The trivial consumer's work: an awaited call, like a node's ``run``."""


async def _queue_once(n: int) -> tuple[float, int]:
    queue: asyncio.Queue[dict[str, int]] = asyncio.Queue(maxsize=ASYNCIO_QUEUE_SIZE)
    out_of_order = 0

    async def producer() -> None:
        for seq in range(n):
            await queue.put({"seq": seq})

    async def consumer() -> None:
        nonlocal out_of_order
        for expected in range(n):
            value = await queue.get()
            out_of_order += value["seq"] != expected
            await _consume(value)

    started = time.perf_counter()
    await asyncio.gather(producer(), consumer())
    return n / (time.perf_counter() - started), out_of_order


def measure_asyncio_queue(n: int, reps: int) -> Json:
    rates: list[float] = []
    bad = 0
    for _ in range(reps):
        rate, out_of_order = run_async(_queue_once(n))
        rates.append(rate)
        bad += out_of_order
    best, median = best_and_median(rates)
    return {
        "rates": rates,
        "best": best,
        "median": median,
        "n": n,
        "out_of_order": bad,
        "queue_size": ASYNCIO_QUEUE_SIZE,
    }


# -- raw SQLite ----------------------------------------------------------------------


def _open_raw(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)  # autocommit: one statement, one txn
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.executescript(SQLITE_SCHEMA)
    return con


def sqlite_inserts_once(n: int) -> float:
    """Rows per second, each INSERT its own (autocommit) transaction."""
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-") as tmp:
        con = _open_raw(Path(tmp) / "raw.sqlite3")
        try:
            started = time.perf_counter()
            for seq in range(n):
                con.execute(INSERT_SQL, (f'{{"seq": {seq}}}', time.time()))
            elapsed = time.perf_counter() - started
        finally:
            con.close()
    return n / elapsed


def sqlite_claim_ack_once(n: int, batch: int = CLAIM_BATCH) -> float:
    """Items per second claimed in batches (one transaction) and acked (another)."""
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-") as tmp:
        con = _open_raw(Path(tmp) / "raw.sqlite3")
        try:
            now = time.time()
            con.execute("BEGIN")
            con.executemany(INSERT_SQL, ((f'{{"seq": {i}}}', now) for i in range(n)))
            con.execute("COMMIT")
            done = 0
            started = time.perf_counter()
            while True:
                con.execute("BEGIN IMMEDIATE")
                rows = con.execute(CLAIM_SQL, ("bench", time.time(), batch)).fetchall()
                con.execute("COMMIT")
                if not rows:
                    break
                con.execute("BEGIN IMMEDIATE")
                con.executemany(ACK_SQL, ((row[0],) for row in rows))
                con.execute("COMMIT")
                done += len(rows)
            elapsed = time.perf_counter() - started
        finally:
            con.close()
    if done != n:
        raise RuntimeError(f"claimed and acked {done} of {n} rows")
    return n / elapsed


def measure_sqlite(n: int, reps: int) -> Json:
    inserts = [sqlite_inserts_once(n) for _ in range(reps)]
    claim_ack = [sqlite_claim_ack_once(n) for _ in range(reps)]
    ins_best, ins_median = best_and_median(inserts)
    ca_best, ca_median = best_and_median(claim_ack)
    return {
        "n": n,
        "sqlite_version": sqlite3.sqlite_version,
        "insert": {"rates": inserts, "best": ins_best, "median": ins_median},
        "claim_ack": {
            "rates": claim_ack,
            "best": ca_best,
            "median": ca_median,
            "batch": CLAIM_BATCH,
        },
    }


# -- Pipecat ---------------------------------------------------------------------------


@dataclass
class _PipecatProbe:
    n: int
    consumed: int = 0
    out_of_order: int = 0
    started: float = 0.0
    finished: float = 0.0


def _quiet_loguru() -> None:
    """Pipecat logs through loguru at DEBUG to stderr; keep only warnings and up."""
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")


async def _pipecat_once(n: int, timeout_s: float, probe: _PipecatProbe, shape: str) -> float:
    from pipecat.frames.frames import DataFrame, EndFrame, Frame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.workers.runner import WorkerRunner

    @dataclass
    class SeqFrame(DataFrame):
        seq: int = 0

    class Source(FrameProcessor):
        """Passes lifecycle frames on; ``produce`` pushes the N data frames."""

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            await self.push_frame(frame, direction)

        async def produce(self) -> None:
            probe.started = time.perf_counter()
            for seq in range(n):
                await self.push_frame(SeqFrame(seq=seq))

    done = asyncio.Event()

    class Consumer(FrameProcessor):
        """The trivial second stage: counts data frames (they end here)."""

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, SeqFrame):
                probe.out_of_order += frame.seq != probe.consumed
                probe.consumed += 1
                if probe.consumed == n:
                    probe.finished = time.perf_counter()
                    done.set()
                if not via_worker:
                    return  # data frames end here
            await self.push_frame(frame, direction)

    via_worker = shape == "queue_frame"
    source = Source()
    processors = [Consumer()] if via_worker else [source, Consumer()]
    worker = PipelineWorker(
        Pipeline(processors),
        params=PipelineParams(enable_metrics=False, enable_usage_metrics=False),
        observers=[],
        enable_rtvi=False,
        enable_turn_tracking=False,
        enable_tracing=False,
        idle_timeout_secs=None,
        check_dangling_tasks=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")  # type: ignore[untyped-decorator]
    async def _on_started(_worker: Any, _frame: Any) -> None:
        started.set()

    runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(started.wait(), 30)
        if via_worker:
            probe.started = time.perf_counter()
            for seq in range(n):
                await worker.queue_frame(SeqFrame(seq=seq))
        else:
            await source.produce()
        await asyncio.wait_for(done.wait(), timeout_s)
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, 30)
    finally:
        if not running.done():
            await runner.cancel()
            await asyncio.gather(running, return_exceptions=True)
    return n / (probe.finished - probe.started)


def measure_pipecat(n: int, reps: int, timeout_s: float, shape: str = "processors") -> Json:
    """``shape="processors"``: a source processor pushes the frames to the consumer
    processor (the analogue of mediaflow's two-node flow). ``"queue_frame"``: the
    frames enter through ``PipelineWorker.queue_frame`` (the worker's push queue
    and pipeline source) and the consumer passes them on to the worker's sink."""
    try:
        version = importlib.metadata.version("pipecat-ai")
        _quiet_loguru()
        import pipecat.pipeline.worker  # noqa: F401 - fail here, not mid-measurement
    except Exception as exc:  # ImportError, or a broken install
        return {"unavailable": f"{type(exc).__name__}: {exc}"}
    rates: list[float] = []
    bad = 0
    for _ in range(reps):
        probe = _PipecatProbe(n)

        def partial(probe: _PipecatProbe = probe) -> Json:
            return {"version": version, "rates": rates, "consumed": probe.consumed, "n": n}

        with Watchdog(timeout_s + 40, partial):
            rates.append(run_async(_pipecat_once(n, timeout_s, probe, shape)))
        bad += probe.out_of_order
    best, median = best_and_median(rates)
    return {
        "version": version,
        "shape": shape,
        "rates": rates,
        "best": best,
        "median": median,
        "n": n,
        "out_of_order": bad,
    }
