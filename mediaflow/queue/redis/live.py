"""Which artifact digests a Redis queue holds, for garbage collection.

Redis has no snapshot a reader can hold open while writers go on, so the read
is made safe another way. The reader registers in ``P:gc:readers`` (with an
expiry, in case it dies) *before* it reads anything; while any reader is
registered, every script that writes a reference (an item, a latest value, a
dead letter) also appends the digests it wrote to ``P:gc:seen``. The reader
then pages through the streams, latest values and dead letters, and last reads
what ``P:gc:seen`` gathered since it registered.

Why nothing live is missed: a reference live when the read ends is either in a
record that existed, unchanged, for the whole read (the pages find it) or in a
record written during the read (``P:gc:seen`` has it). A forward, which acks
an item and writes its reference elsewhere in one script, is the second case.
What was live only during the read may be reported too: garbage collection
keeps it one sweep longer.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from mediaflow.queue.redis.client import RedisScripts

DIGEST_RE: Final = re.compile(rb"sha256:[0-9a-f]{64}")
READER_TTL_S: Final = 600.0
"""A reader that has not finished (or refreshed itself) after this long is taken
for dead: writers stop noting digests for it."""


async def read_live_digests(queue: RedisScripts, batch: int) -> AsyncIterator[list[str]]:
    """The digests ``queue`` holds, in lists of at most ``batch`` records' worth
    (see :meth:`~mediaflow.queue.contract.WorkQueue.live_digests`)."""
    readers, seen = queue.key("gc", "readers"), queue.key("gc", "seen")
    token = uuid.uuid4().hex
    await queue.call("ZADD", readers, time.time() + READER_TTL_S, token)
    try:
        start = int(await queue.call("LLEN", seen))
        for name in sorted(await queue.call("SMEMBERS", queue.key("streams"))):
            key = queue.key("s", name.decode())
            async for page in _stream_pages(queue, key, batch, readers, token):
                yield page
        async for page in _latest_pages(queue, batch):
            yield page
        for flow in sorted(await queue.call("SMEMBERS", queue.key("deadflows"))):
            key = queue.key("dead", flow.decode())
            async for page in _stream_pages(queue, key, batch, readers, token):
                yield page
        while True:
            noted = await queue.call("LRANGE", seen, start, start + batch - 1)
            if not noted:
                break
            start += len(noted)
            yield sorted({d.decode() for d in noted})
    finally:
        await queue.call("ZREM", readers, token)
        if int(await queue.call("ZCOUNT", readers, time.time(), "+inf")) == 0:
            await queue.call("DEL", seen)


async def _stream_pages(
    queue: RedisScripts, key: str, batch: int, readers: str, token: str
) -> AsyncIterator[list[str]]:
    after = "-"
    while True:
        entries = await queue.call("XRANGE", key, after, "+", "COUNT", batch)
        if not entries:
            return
        after = "(" + entries[-1][0].decode()
        # A long read keeps its registration alive.
        await queue.call("ZADD", readers, time.time() + READER_TTL_S, token)
        digests = {d for _rid, fields in entries for d in _digests(fields)}
        if digests:
            yield sorted(digests)
        if len(entries) < batch:
            return


async def _latest_pages(queue: RedisScripts, batch: int) -> AsyncIterator[list[str]]:
    cursor: Any = 0
    pattern = queue.key("latest", "*")
    while True:
        cursor, keys = await queue.call("SCAN", cursor, "MATCH", pattern, "COUNT", 100)
        for key in keys:
            hcursor: Any = 0
            while True:
                hcursor, fields = await queue.call("HSCAN", key, hcursor, "COUNT", batch)
                # A small hash comes back whole whatever COUNT says: page it here.
                values = fields[1::2] if isinstance(fields, list) else list(fields.values())
                for first in range(0, len(values), batch):
                    digests = _digests(values[first : first + batch])
                    if digests:
                        yield sorted(digests)
                if int(hcursor) == 0:
                    break
        if int(cursor) == 0:
            return


def _digests(fields: Any) -> set[str]:
    """The digests in a record's fields (a stream entry's flat list, or values)."""
    values = fields.values() if isinstance(fields, dict) else fields
    return {m.decode() for value in values for m in DIGEST_RE.findall(value)}
