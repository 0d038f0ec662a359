"""A worker thread for CPU-bound encoding, between the capture loop and the emitter.

JPEG and H.264/VP8/VP9 encoding hold a core for milliseconds per frame; on the event
loop that would stall every other node. Each :class:`EncodeLane` owns one thread and
two bounded hand-offs:

- in: at most ``capacity`` jobs queued or being encoded. The capture loop either
  :meth:`~EncodeLane.offer`\\ s a job (live sources: when the lane is full the job is
  skipped at the capture edge and counted, because a camera cannot be paused and a
  growing queue is a memory leak with a delay) or :meth:`~EncodeLane.put`\\ s it
  (a file replayed as fast as possible: waiting is lossless backpressure);
- out: a :class:`devices.FrameBridge` with policy ``"block"``, read by one emitter
  task. A slow emitter (store, queue) stalls the worker, which fills the in side,
  which makes the capture loop skip: memory stays bounded end to end.

Results keep job order. The worker's exception reaches the emitter through the
bridge (and so fails the node); it is never swallowed.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from devices import EndOfStream, FrameBridge
from devices.bridge import start_producer

JobT = TypeVar("JobT")
JobT_contra = TypeVar("JobT_contra", contravariant=True)
OutT = TypeVar("OutT")
OutT_co = TypeVar("OutT_co", covariant=True)

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 5.0


class LaneWork(Protocol[JobT_contra, OutT_co]):
    """What a lane runs on its thread. Both methods may block and may raise."""

    def push(self, job: JobT_contra) -> Sequence[OutT_co]:
        """Encode one job; return the results it completed (possibly none)."""
        ...

    def flush(self) -> Sequence[OutT_co]:
        """Complete whatever is pending (a cut, or the end of the stream)."""
        ...


class _Control:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_CUT = _Control("cut")
_END = _Control("end")


@dataclass(frozen=True)
class LaneStatistics:
    """Counters of one lane; ``in_flight`` never exceeds ``capacity``."""

    accepted: int
    skipped: int
    in_flight: int
    capacity: int


class EncodeLane(Generic[JobT, OutT]):
    """One encoding thread with bounded hand-offs on both sides (see the module doc).

    Create, feed and read it from one event loop. Call :meth:`finish` when no more jobs
    will come (the worker flushes, then :meth:`get` raises ``EndOfStream``) and
    :meth:`close` to stop it whatever state it is in.
    """

    def __init__(
        self, name: str, work: LaneWork[JobT, OutT], *, capacity: int, results: int = 2
    ) -> None:
        """Start the thread. Raises ``ValueError`` for a capacity below 1."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.name = name
        self.capacity = capacity
        self._work = work
        self._loop = asyncio.get_running_loop()
        self._inbox: queue.SimpleQueue[JobT | _Control] = queue.SimpleQueue()
        # In flight = queued - done. Each count has one writer (the loop, the worker), so
        # a slot is released without waking the loop, unless a put() waits for room.
        self._queued = 0
        self._done = 0
        self._wants_room = False
        self._room = asyncio.Event()
        self._accepted = 0
        self._skipped = 0
        self._finished = False
        self._results: FrameBridge[OutT] = FrameBridge(results, "block")
        self._thread: threading.Thread = start_producer(self._results, self._run, name=name)

    # -- event loop side --------------------------------------------------------------

    @property
    def _in_flight(self) -> int:
        return self._queued - self._done

    def offer(self, job: JobT) -> bool:
        """Queue ``job`` if there is room, else count it as skipped. Never waits."""
        if self._in_flight >= self.capacity:
            self._skipped += 1
            return False
        self._enqueue(job)
        return True

    async def put(self, job: JobT) -> None:
        """Queue ``job``, waiting for room. Cancellable (the job is then not queued)."""
        try:
            while self._in_flight >= self.capacity:
                self._room.clear()
                self._wants_room = True
                if self._in_flight < self.capacity:
                    break  # a slot was released before the worker could see the flag
                await self._room.wait()
        finally:
            self._wants_room = False
        self._enqueue(job)

    def cut(self) -> None:
        """Ask the worker to flush what it holds (e.g. close a segment at a device loss)."""
        if not self._finished:
            self._inbox.put(_CUT)

    def finish(self) -> None:
        """No more jobs: the worker flushes, then the results end. Idempotent."""
        if not self._finished:
            self._finished = True
            self._inbox.put(_END)

    async def get(self) -> OutT:
        """The next result, in job order. Raises ``EndOfStream`` after :meth:`finish`
        once everything is out, or the worker's exception."""
        return await self._results.get()

    async def close(self) -> None:
        """Stop the worker (dropping queued jobs and results) and wait for it briefly."""
        self.finish()
        self._results.close()
        await asyncio.to_thread(self._thread.join, JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            log.warning("encoder %s still busy after close", self.name)

    def statistics(self) -> LaneStatistics:
        """A snapshot; call from the event loop."""
        return LaneStatistics(self._accepted, self._skipped, self._in_flight, self.capacity)

    def _enqueue(self, job: JobT) -> None:
        if self._finished:
            raise RuntimeError(f"lane {self.name} is finished")
        self._queued += 1
        self._accepted += 1
        self._inbox.put(job)

    # -- worker thread ------------------------------------------------------------------

    def _run(self, results: FrameBridge[OutT]) -> None:
        while not results.closed:
            job = self._inbox.get()
            if job is _END:
                break
            if isinstance(job, _Control):  # a cut
                outs = self._work.flush()
            else:
                try:
                    outs = self._work.push(job)
                finally:
                    self._release_slot()
            for out in outs:
                results.put(out)
        if results.closed:
            return  # closed, not finished: nobody wants the tail
        for out in self._work.flush():
            results.put(out)

    def _release_slot(self) -> None:
        self._done += 1
        if not self._wants_room:
            return  # nobody waits: the loop sees the room when it next offers
        try:
            self._loop.call_soon_threadsafe(self._room.set)
        except RuntimeError:
            # The loop is closed: nobody will offer another job, so the slot is moot.
            log.debug("lane %s: event loop closed before a slot was released", self.name)


async def drain(lane: EncodeLane[JobT, OutT]) -> list[OutT]:
    """Every remaining result of a finished lane (for tests and the bench)."""
    out: list[OutT] = []
    while True:
        try:
            out.append(await lane.get())
        except EndOfStream:
            return out
