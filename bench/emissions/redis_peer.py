"""The raw redis-py peer of ``python -m bench.emissions --queue redis://...``.

What a careful hand-written consumer of a Redis stream does, on the same server,
the same client library (redis-py's asyncio client, no hiredis unless installed)
and the same event loop as mediaflow:

* a producer task ``XADD``\\ s N entries ``{"v": '{"seq": n}'}`` (JSON, as a
  real producer would encode a value), ``PRODUCER_BATCH`` commands per pipeline
  (one round trip each: mediaflow's group commit carries a turn, 128 values);
* a consumer task, concurrently, in a consumer group: ``XREADGROUP COUNT
  CONSUMER_BATCH BLOCK`` new entries, decodes each value and checks its seq,
  then acknowledges the batch with ``XACK``, sent in the same pipeline as the
  next ``XREADGROUP`` (one round trip per batch);
* timed from the producer's first ``XADD`` until the consumer's last ``XACK``
  returned: all N acknowledged.

It does less than mediaflow on purpose (the peer is the ceiling, not a straw
man): no ``XDEL`` (mediaflow deletes acked entries so a stream holds only
unfinished work), no sequence counters, no latest values, no Lua. Each run
uses a fresh stream key and deletes it afterwards.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench._lib.common import Json, Watchdog, best_and_median, run_async

PRODUCER_BATCH = 128  # mediaflow's turn (MEDIAFLOW_NODE_BUFFER // 2)
CONSUMER_BATCH = 256  # mediaflow's line (MEDIAFLOW_NODE_BUFFER)
BLOCK_MS = 100
GROUP = "bench"


@dataclass
class RawProbe:
    n: int
    produced: int = 0
    acked: int = 0
    out_of_order: int = 0
    duplicates: int = 0
    round_trips: int = 0
    started: float = 0.0
    finished: float = 0.0

    def to_json(self) -> Json:
        elapsed = (self.finished or time.perf_counter()) - self.started if self.started else None
        return {
            "n": self.n,
            "produced": self.produced,
            "acked": self.acked,
            "out_of_order": self.out_of_order,
            "duplicates": self.duplicates,
            "round_trips": self.round_trips,
            "elapsed_s": elapsed,
        }


async def _producer(client: Any, key: str, probe: RawProbe) -> None:
    n = probe.n
    for start in range(0, n, PRODUCER_BATCH):
        pipe = client.pipeline(transaction=False)
        for seq in range(start, min(start + PRODUCER_BATCH, n)):
            pipe.xadd(key, {"v": json.dumps({"seq": seq})})
        await pipe.execute()
        probe.produced = min(start + PRODUCER_BATCH, n)
        probe.round_trips += 1


async def _consumer(client: Any, key: str, probe: RawProbe) -> None:
    expected = 0
    to_ack: list[bytes] = []
    while probe.acked < probe.n:
        pipe = client.pipeline(transaction=False)
        if to_ack:
            pipe.xack(key, GROUP, *to_ack)
        pipe.xreadgroup(GROUP, "c1", {key: ">"}, count=CONSUMER_BATCH, block=BLOCK_MS)
        replies = await pipe.execute()
        probe.round_trips += 1
        if to_ack:
            probe.acked += int(replies[0])
        to_ack = []
        for _stream, entries in replies[-1] or ():
            for entry_id, fields in entries:
                seq = json.loads(fields[b"v"])["seq"]
                if seq < expected:
                    probe.duplicates += 1
                elif seq > expected:
                    probe.out_of_order += 1
                expected = max(expected, seq + 1)
                to_ack.append(entry_id)
        if to_ack and probe.acked + len(to_ack) >= probe.n:
            # The last batch: acknowledge it alone, nothing more to read.
            probe.acked += int(await client.xack(key, GROUP, *to_ack))
            probe.round_trips += 1
            to_ack = []
    probe.finished = time.perf_counter()


async def raw_once(url: str, probe: RawProbe) -> float:
    """One run on a fresh stream; returns N / seconds until the last XACK returned."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url, decode_responses=False)
    key = f"bench-raw:{uuid.uuid4().hex[:12]}"
    try:
        await client.xgroup_create(key, GROUP, id="0", mkstream=True)
        # Both connections are open before the clock starts, as mediaflow's are
        # once its session has started.
        await asyncio.gather(client.ping(), client.ping())
        probe.started = time.perf_counter()
        await asyncio.gather(_producer(client, key, probe), _consumer(client, key, probe))
        return probe.n / (probe.finished - probe.started)
    finally:
        await client.delete(key)
        await client.aclose()


def measure_redis_raw(url: str, n: int, reps: int = 1, timeout_s: float = 60.0) -> Json:
    """``reps`` runs of :func:`raw_once` in this process (a child of the bench),
    each given ``timeout_s`` before the watchdog reports what it did and exits."""
    rates: list[float] = []
    runs: list[Json] = []
    for _ in range(reps):
        probe = RawProbe(n)

        def partial(probe: RawProbe = probe) -> Json:
            return {"rates": rates, **probe.to_json()}

        with Watchdog(timeout_s, partial):
            rates.append(run_async(raw_once(url, probe)))
        runs.append(probe.to_json())
    best, median = best_and_median(rates)
    return {
        "rates": rates,
        "best": best,
        "median": median,
        "n": n,
        "runs": runs,
        "producer_batch": PRODUCER_BATCH,
        "consumer_batch": CONSUMER_BATCH,
    }
