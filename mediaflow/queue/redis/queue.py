"""The distributed work-queue backend: Redis Streams, one consumer group per stream.

Selected by ``MEDIAFLOW_QUEUE=redis://host:port/db`` (``rediss://`` for TLS,
``unix://`` for a socket); needs the ``redis`` extra (redis-py's asyncio
client). Several processes on several machines share one Redis: claims are
``XREADGROUP`` (never-delivered items) and ``XCLAIM`` (items handed back),
acks ``XACK`` + ``XDEL`` (a stream holds only unfinished work), touches
``XCLAIM ... JUSTID``, reclaims ``XPENDING IDLE`` + ``XCLAIM``, dead letters
go to a stream per flow. Each operation is one Lua script (:mod:`.lua`), so it is atomic
like the SQLite backend's transactions; the layout is described there.

Durability is Redis's: with ``appendonly yes`` (and ``appendfsync everysec``
or ``always``) a Redis restart loses nothing a method returned for; without
persistence, a restart of Redis loses the queue.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from mediaflow.queue.contract import (
    DeadLetter,
    EmissionRun,
    LeaseTable,
    NewItem,
    QueueError,
    QueueStats,
    StreamBacklog,
    StreamKey,
    WorkItem,
)
from mediaflow.queue.records import dead_record, dumps, per_flow
from mediaflow.queue.redis.client import RedisScripts
from mediaflow.queue.redis.live import read_live_digests
from mediaflow.queue.redis.rows import (
    AppendRow,
    append_rows,
    dead_letter_of,
    entry_id,
    ids_args,
    items_of,
    latest_args,
    pairs,
    split_dead_id,
    split_entry_id,
    stream_key,
    stream_name,
    text,
)
from mediaflow.redact import public_url


class RedisQueue:
    """:class:`~mediaflow.queue.contract.WorkQueue` on one Redis (not a cluster).

    Opening connects lazily: the constructor checks the URL and needs no event
    loop; the first call connects (:mod:`.client`). Every method raises
    :class:`~mediaflow.queue.contract.QueueUnavailable` when Redis cannot be
    reached or refuses, and ``QueueError`` after :meth:`close`; the next call,
    once Redis is back, reconnects. ``prefix`` namespaces the keys, so several
    installations (or tests) share one Redis.
    """

    def __init__(self, url: str, *, prefix: str = "mediaflow") -> None:
        self.url = url
        self.prefix = prefix
        self._redis = RedisScripts(url, prefix=prefix)
        self._run = self._redis.run
        self._call = self._redis.call
        self.key = self._redis.key

    def __repr__(self) -> str:
        return f"RedisQueue({public_url(self.url)!r}, prefix={self.prefix!r})"

    # -- commit and claim ---------------------------------------------------

    async def commit(
        self,
        batch: Sequence[EmissionRun | NewItem],
        *,
        claim_for: str | None = None,
        ack: Sequence[str] = (),
        latest: Mapping[tuple[str, str, str], Any] | None = None,
    ) -> list[WorkItem]:
        """See :meth:`WorkQueue.commit`: one script (``ENQUEUE``) appends every
        entry, acks and records latest values."""
        rows = append_rows(batch)
        if not rows and not ack and not latest:
            return []
        now = time.time()
        stored = iter(await self._append(rows, claim_for, ack, latest, now))
        out: list[WorkItem] = []
        for entry in batch:
            if isinstance(entry, NewItem):
                seq, delivered = next(stored)
                stream, kind = entry.stream, entry.kind
                out.append(
                    WorkItem(
                        entry_id(stream, seq), stream, kind, entry.payload, seq, delivered, now
                    )
                )
                continue
            for value in entry.values:
                seq, delivered = next(stored)
                if delivered:
                    body = {"src": entry.src, "port": entry.port, "value": value, "at": entry.at}
                    stored_id = entry_id(entry.stream, seq)
                    out.append(WorkItem(stored_id, entry.stream, "emission", body, seq, 1, now))
        return out

    async def _append(
        self,
        rows: Sequence[AppendRow],
        claim_for: str | None,
        ack: Sequence[str],
        latest: Mapping[tuple[str, str, str], Any] | None,
        now: float,
    ) -> list[tuple[int, int]]:
        """Append ``rows`` (stream, kind, payload JSON, claim?) in one script;
        return each row's (seq, deliveries)."""
        args: list[Any] = [claim_for or "", len(rows)]
        for stream, kind, payload, claim in rows:
            args += [stream_name(stream), kind, payload, "1" if claim else "0"]
        ack_args = ids_args(ack)
        args += [len(ack_args) // 2, *ack_args]
        latest_rows = latest_args(latest)
        args += [len(latest_rows) // 3, *latest_rows]
        reply = await self._run("ENQUEUE", *args, now=now)
        pairs = reply[:-1]
        return [(int(pairs[i]), int(pairs[i + 1])) for i in range(0, len(pairs), 2)]

    async def put_latest(self, latest: Mapping[tuple[str, str, str], Any]) -> None:
        """See :meth:`WorkQueue.put_latest`."""
        args = latest_args(latest)
        if args:
            await self._run("PUT_LATEST", len(args) // 3, *args)

    async def latest(self, flow: str) -> dict[tuple[str, str], Any]:
        """See :meth:`WorkQueue.latest`."""
        raw = await self._call("HGETALL", self.key("latest", flow))
        values: dict[tuple[str, str], Any] = {}
        for field, value in pairs(raw):
            node, _, port = text(field).partition(".")
            values[(node, port)] = json.loads(value)
        return values

    async def claim(self, consumer: str, wants: Mapping[StreamKey, int]) -> list[WorkItem]:
        """See :meth:`WorkQueue.claim`. Streams wanted 0 or fewer times are skipped."""
        args: list[Any] = [consumer, 0]
        for stream, n in wants.items():
            if n > 0:
                args += [stream_name(stream), n]
        if len(args) == 2:
            return []
        args[1] = (len(args) - 2) // 2
        return items_of(await self._run("CLAIM", *args))

    # -- finishing and holding -----------------------------------------------

    async def ack(self, entry_ids: Sequence[str]) -> int:
        """See :meth:`WorkQueue.ack`: pending items go (``XACK`` + ``XDEL``)."""
        args = ids_args(entry_ids)
        return int(await self._run("ACK", len(args) // 2, *args)) if args else 0

    async def touch(self, consumer: str, entry_ids: Sequence[str]) -> int:
        """See :meth:`WorkQueue.touch` (``XCLAIM ... JUSTID`` of what it still holds)."""
        args = ids_args(entry_ids)
        if not args:
            return 0
        return int(await self._run("TOUCH", consumer, len(args) // 2, *args))

    async def release(self, entry_ids: Sequence[str], *, started: bool = True) -> int:
        """See :meth:`WorkQueue.release`."""
        args = ids_args(entry_ids)
        if not args:
            return 0
        return int(await self._run("RELEASE", "1" if started else "0", len(args) // 2, *args))

    async def release_consumer(self, consumer: str) -> int:
        """See :meth:`WorkQueue.release_consumer`."""
        released = int(await self._run("RELEASE_CONSUMER", consumer))
        await self._run("DROP_CONSUMER", consumer)
        return released

    async def lease(
        self,
        flow: str,
        consumer: str,
        *,
        ttl_ms: int,
        hold: Sequence[StreamKey] = (),
        acquire: Sequence[StreamKey] = (),
        release: Sequence[StreamKey] = (),
        leave: bool = False,
    ) -> LeaseTable:
        """See :meth:`WorkQueue.lease`: one script (:mod:`.lua_lease`),
        expiry by the Redis server's clock."""
        args: list[Any] = [flow, consumer, int(ttl_ms), "1" if leave else "0"]
        for streams in (hold, acquire, release):
            args.append(len(streams))
            args.extend(s.node for s in streams)
        holders, members, taken, _handed = await self._run("LEASE", *args)
        return LeaseTable(
            {
                StreamKey(flow, holders[i].decode()): holders[i + 1].decode()
                for i in range(0, len(holders), 2)
            },
            tuple(sorted(m.decode() for m in members)),
            frozenset(StreamKey(flow, node.decode()) for node in taken),
        )

    async def reclaim_stale(self, idle_ms: int) -> list[WorkItem]:
        """See :meth:`WorkQueue.reclaim_stale`."""
        return items_of(await self._run("RECLAIM", int(idle_ms)))

    async def dead_letter(self, item: WorkItem, reason: str) -> None:
        """See :meth:`WorkQueue.dead_letter`."""
        record = dead_record(item)
        parsed = split_entry_id(item.entry_id) or (stream_name(item.stream), f"{item.seq}-0")
        await self._run("DEAD_LETTER", *parsed, item.stream.flow, record, reason)

    async def dead_letters(self, flow: str | None = None, limit: int = 100) -> list[DeadLetter]:
        """See :meth:`WorkQueue.dead_letters`; newest first."""
        if flow is None:
            flows = [text(f) for f in await self._call("SMEMBERS", self.key("deadflows"))]
        else:
            flows = [flow]
        rows: list[tuple[int, DeadLetter]] = []
        for name in flows:
            for rid, raw in await self._call(
                "XREVRANGE", self.key("dead", name), "+", "-", "COUNT", limit
            ):
                fields = dict(pairs(raw))
                rows.append((int(fields[b"n"]), dead_letter_of(rid, fields)))
        rows.sort(key=lambda row: row[0], reverse=True)
        return [letter for _, letter in rows[:limit]]

    async def dead_letter_of(self, flow: str, dead_id: str) -> DeadLetter | None:
        """See :meth:`WorkQueue.dead_letter_of`. The id is ``<n>-<entry id>``: the
        dead letter's number (one counter for every flow) and its entry in the
        flow's dead-letter stream, found with one ``XRANGE``."""
        parsed = split_dead_id(dead_id)
        if parsed is None:
            return None
        n, did = parsed
        for rid, raw in await self._call("XRANGE", self.key("dead", flow), did, did):
            fields = dict(pairs(raw))
            if text(fields.get(b"n", b"")) == n:
                return dead_letter_of(rid, fields)
        return None

    async def requeue_dead_letter(self, flow: str, dead_id: str) -> WorkItem | None:
        """See :meth:`WorkQueue.requeue_dead_letter`. Reads the dead letter, then
        one script moves it if it is still there (else None, nothing changed).
        The item takes the stream's next seq, so it is claimed after every item
        waiting; to stay behind those never delivered, it turns them into items
        handed back (``~ready``), one step each.
        Never requeues twice: run again (an answer lost), the script finds no
        dead letter and changes nothing."""
        parsed = split_dead_id(dead_id)
        letter = None if parsed is None else await self.dead_letter_of(flow, dead_id)
        if parsed is None or letter is None:
            return None
        item = letter.item
        now = time.time()
        args = [stream_name(item.stream), item.kind, dumps(item.payload), item.deliveries]
        seq = int(await self._run("REQUEUE_DEAD", flow, *parsed, *args, now=now))
        if seq == 0:
            return None
        stored = entry_id(item.stream, seq)
        return WorkItem(stored, item.stream, item.kind, item.payload, seq, item.deliveries, now)

    async def delete_dead_letter(self, flow: str, dead_id: str) -> bool:
        """See :meth:`WorkQueue.delete_dead_letter` (one script)."""
        parsed = split_dead_id(dead_id)
        if parsed is None:
            return False
        return int(await self._run("DELETE_DEAD", flow, *parsed)) > 0

    # -- looking at the queue, parking ---------------------------------------

    async def backlog(self) -> dict[StreamKey, StreamBacklog]:
        """See :meth:`WorkQueue.backlog`; streams with nothing unacked are omitted."""
        flat = await self._run("BACKLOG")
        out: dict[StreamKey, StreamBacklog] = {}
        for i in range(0, len(flat), 4):
            name, ready, pending, oldest = flat[i : i + 4]
            out[stream_key(text(name))] = StreamBacklog(
                int(ready), int(pending), 0, float(text(oldest))
            )
        return out

    async def backlog_flows(self) -> dict[str, int]:
        """See :meth:`WorkQueue.backlog_flows`."""
        return per_flow(await self.backlog())

    async def park(self, flow: str) -> None:
        """See :meth:`WorkQueue.park` (cancels any steps left)."""
        await self._call("HSET", self.key("parked"), flow, "")

    async def unpark(self, flow: str, *, steps: int | None = None) -> None:
        """See :meth:`WorkQueue.unpark`. Raises ``ValueError`` for negative ``steps``."""
        if steps is None:
            await self._call("HDEL", self.key("parked"), flow)
        elif steps < 0:
            raise ValueError(f"steps must be at least 0, not {steps}")
        else:
            await self._call("HSET", self.key("parked"), flow, str(steps) if steps else "")

    async def parked(self) -> dict[str, int | None]:
        """See :meth:`WorkQueue.parked`."""
        raw = await self._call("HGETALL", self.key("parked"))
        return {text(f): (int(v) if text(v) else None) for f, v in pairs(raw)}

    async def stats(self) -> QueueStats:
        """Counters kept in Redis. ``extra``: ``backend``, ``url`` (no password),
        ``prefix``, ``requeued`` (dead letters put back)."""
        counters = {
            text(f): int(v) for f, v in pairs(await self._call("HGETALL", self.key("stats")))
        }
        seqs = await self._call("HVALS", self.key("seq"))
        backlog = await self.backlog()
        parked = await self.parked()
        return QueueStats(
            enqueued=sum(int(v) for v in seqs),
            acked=counters.get("acked", 0),
            dead_lettered=counters.get("dead_lettered", 0),
            redelivered=counters.get("redelivered", 0),
            backlog=sum(b.total for b in backlog.values()),
            parked_flows=tuple(sorted(parked)),
            extra={
                "backend": "redis",
                "url": public_url(self.url),
                "prefix": self.prefix,
                "requeued": counters.get("requeued", 0),
            },
        )

    # -- storage lifecycle ---------------------------------------------------

    def live_digests(self, *, batch: int = 1000) -> AsyncIterator[list[str]]:
        """See :meth:`WorkQueue.live_digests` and :mod:`.live`."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, not {batch}")
        return read_live_digests(self._redis, batch)

    async def trim_dead_letters(self, *, before: float, keep_per_flow: int) -> int:
        """See :meth:`WorkQueue.trim_dead_letters`. A dead letter's age is the time
        its ``dead_letter`` call gave (the caller's clock), read oldest first."""
        if keep_per_flow < 0:
            raise ValueError(f"keep_per_flow must be at least 0, not {keep_per_flow}")
        return int(await self._run("TRIM_DEAD", repr(float(before)), keep_per_flow))

    async def forget_flow(self, flow: str) -> dict[str, int]:
        """See :meth:`WorkQueue.forget_flow`."""
        reply = await self._run("FORGET_FLOW", flow)
        if int(reply[0]) < 0:
            raise QueueError(
                f"flow {flow!r} still has {-int(reply[0])} item(s) waiting in the queue; "
                "forget it once they have been consumed or dead-lettered"
            )
        return {"latest": int(reply[0]), "dead_letters": int(reply[1])}

    async def close(self) -> None:
        """See :meth:`WorkQueue.close`. Idempotent."""
        await self._redis.close()
