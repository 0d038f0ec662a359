"""Turning an async iterator of chunks into writes on a worker thread, in bounded memory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeAlias

from mediaflow.store.files import PartFile

Chunk: TypeAlias = bytes | bytearray | memoryview

# Chunks are coalesced into batches of this size before a worker thread writes
# them: fewer thread hops, and the memory bound (two batches in flight).
BATCH_BYTES = 1 << 20


async def fill_part(part: PartFile, chunks: AsyncIterable[Chunk]) -> None:
    """Write ``chunks`` into ``part`` from worker threads, one batch behind the iterator.

    Bounded hand-off: one batch being written, one being filled. When the
    next batch is full before the previous write ends, the iterator is not
    advanced until it does (backpressure by blocking, nothing dropped).
    """
    writing: asyncio.Future[None] | None = None
    batch = bytearray()
    try:
        async for chunk in chunks:
            ready: Chunk
            if not batch and isinstance(chunk, bytes) and len(chunk) >= BATCH_BYTES:
                ready = chunk  # immutable, so handing it over without a copy is safe
            else:
                batch += check_chunk(chunk)
                if len(batch) < BATCH_BYTES:
                    continue
                ready, batch = batch, bytearray()
            if writing is not None:
                await writing
            writing = asyncio.ensure_future(asyncio.to_thread(part.write, ready))
        if writing is not None:
            await writing
        if batch:
            await asyncio.to_thread(part.write, batch)
    except BaseException:
        if writing is not None and not writing.done():
            # The thread runs on; PartFile's lock makes the caller's discard wait for it.
            writing.cancel()
        elif writing is not None and not writing.cancelled():
            writing.exception()  # retrieved: the error that is propagating wins
        raise


@asynccontextmanager
async def spooled(chunks: AsyncIterable[Chunk], tmp_dir: Path) -> AsyncIterator[Path]:
    """``chunks`` written to a temp file in ``tmp_dir``, for a save that may have to
    read them more than once (an iterator cannot be replayed). Constant memory, as
    :func:`fill_part`. The file is removed on the way out. Its name is a part's,
    so a process that crashes meanwhile leaves it to the store's sweep of stale
    parts. Raises what writing raises (``OSError``), or what the iterator raises.
    """
    await asyncio.to_thread(tmp_dir.mkdir, parents=True, exist_ok=True)
    part = await asyncio.to_thread(PartFile, tmp_dir)
    try:
        await fill_part(part, chunks)
        yield part.path
    finally:
        # The thread finishes the removal even if this await is cancelled.
        await asyncio.to_thread(part.discard)


def check_chunk(chunk: object) -> Chunk:
    if not isinstance(chunk, bytes | bytearray | memoryview):
        raise TypeError(f"chunks must be bytes-like, got {type(chunk).__name__}")
    return chunk
