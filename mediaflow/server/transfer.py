"""Sending a span of an open artifact: inline, zero-copy ``sendfile``, or chunked reads.

Four ways, chosen per response:

0. **inline** (:func:`inline_response`): a span up to ``MEDIAFLOW_INLINE_MAX``
   (16 KiB) is read with ``os.pread`` and leaves with its headers in one write.
1. **direct sendfile** (:class:`SpanResponse`): on a plain TCP transport (no
   TLS) whose write buffer is empty, the headers are written under
   ``TCP_CORK`` and ``os.sendfile`` is called on the socket right away, so
   headers and body leave as one push. The socket is non-blocking: this never
   waits for the peer, and a span that fits the socket buffer (a 64 KiB
   range) costs no future, no thread and no reader pause. As in nginx without
   thread pools, a page missing from the page cache is read synchronously.
2. **loop.sendfile** for whatever the socket would not take at once: asyncio
   waits for writability and keeps calling ``sendfile``.
3. **chunked**: ``os.pread`` in a worker thread, 256 KiB at a time, written
   through the response (backpressure by ``drain``). Used when sendfile is
   switched off (``MEDIAFLOW_SENDFILE=0``) or the transport cannot do it
   (TLS, a loop without native sendfile such as uvloop).

:class:`TransferStats` counts bytes per way, for tests and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from dataclasses import dataclass
from typing import TypeGuard

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from multidict import CIMultiDict

from mediaflow.server.filecache import ArtifactCache, OpenArtifact
from mediaflow.server.ranges import Decision

CHUNK = 256 * 1024
_TCP_CORK: int | None = getattr(socket, "TCP_CORK", None)


class ArtifactTruncated(OSError):
    """An artifact file ended before its recorded size: the response cannot be completed."""


@dataclass
class TransferStats:
    """Bytes sent by each path since the app started."""

    inline: int = 0
    direct: int = 0
    loop_sendfile: int = 0
    chunked: int = 0


class SpanResponse(web.StreamResponse):
    """A 200 or 206 whose body is ``length`` bytes of ``entry`` from ``start``.

    Holds a reference on the cache entry until the transfer ends (or the
    response is dropped unsent), so eviction never closes a file mid-send.
    """

    def __init__(
        self,
        *,
        status: int,
        headers: CIMultiDict[str],
        cache: ArtifactCache,
        entry: OpenArtifact,
        start: int,
        length: int,
        sendfile: bool,
        stats: TransferStats,
    ) -> None:
        super().__init__(status=status, headers=headers)
        self.content_length = length
        self._cache = cache
        self._entry: OpenArtifact | None = entry
        self._span_start = start
        self._span_length = length
        self._use_sendfile = sendfile
        self._stats = stats

    def _release(self) -> None:
        entry = getattr(self, "_entry", None)  # absent if __init__ failed part-way
        self._entry = None
        if entry is not None:
            self._cache.release(entry)

    def __del__(self) -> None:
        # A handler error after building the response, or a client gone before
        # prepare(): give the reference back so the file can close.
        self._release()

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self.prepared:
            return await super().prepare(request)
        try:
            entry = self._entry
            transport = request.transport
            if entry is None or not self._span_length or request.method == "HEAD":
                return await super().prepare(request)
            if transport is None or transport.is_closing():
                raise ConnectionResetError("connection lost before the body was sent")
            if self._use_sendfile and _plain_socket(transport):
                writer = await self._send_direct(request, transport, entry)
            else:
                writer = await super().prepare(request)
                await self._send_chunks(entry, self._span_start, self._span_length)
            await super().write_eof()
            return writer
        finally:
            self._release()

    async def _send_direct(
        self, request: web.BaseRequest, transport: asyncio.WriteTransport, entry: OpenArtifact
    ) -> AbstractStreamWriter | None:
        """Headers and as much of the body as the socket takes now, in one TCP push;
        the rest through ``loop.sendfile`` (or chunks, if the loop has no native one)."""
        sock = transport.get_extra_info("socket")
        offset, remaining = self._span_start, self._span_length
        # Corked, the headers wait in the kernel for the body instead of leaving as a
        # segment of their own (and costing the peer a wake-up of its own).
        _cork(sock, True)
        try:
            writer = await super().prepare(request)
            if transport.get_write_buffer_size() == 0:
                sent = _sendfile_now(sock.fileno(), entry.fd, offset, remaining)
                self._stats.direct += sent
                offset += sent
                remaining -= sent
        finally:
            _cork(sock, False)
        if not remaining:
            return writer
        try:
            await asyncio.get_running_loop().sendfile(
                transport, entry.file, offset, remaining, fallback=False
            )
        except (NotImplementedError, asyncio.SendfileNotAvailableError):
            await self._send_chunks(entry, offset, remaining)  # no native sendfile here
        else:
            self._stats.loop_sendfile += remaining
        return writer

    async def _send_chunks(self, entry: OpenArtifact, offset: int, remaining: int) -> None:
        loop = asyncio.get_running_loop()
        while remaining:
            data = await loop.run_in_executor(
                None, os.pread, entry.fd, min(CHUNK, remaining), offset
            )
            if not data:
                raise ArtifactTruncated(f"{entry.path} ended {remaining} bytes early")
            await self.write(data)
            self._stats.chunked += len(data)
            offset += len(data)
            remaining -= len(data)


def inline_response(
    status: int,
    headers: CIMultiDict[str],
    entry: OpenArtifact,
    decision: Decision,
    stats: TransferStats,
) -> web.Response:
    """A small body read now and sent with its headers in one write.

    ``os.pread`` on the loop: for a span this small it costs what the kernel's
    own copy in ``sendfile`` costs (and blocks the same way on a page that is
    not cached), and it saves a system call and a TCP segment per response.
    """
    data = os.pread(entry.fd, decision.length, decision.start)
    if len(data) != decision.length:
        raise ArtifactTruncated(f"{entry.path} is shorter than its recorded size")
    stats.inline += len(data)
    return web.Response(status=status, headers=headers, body=data)


def _plain_socket(transport: asyncio.BaseTransport) -> TypeGuard[asyncio.WriteTransport]:
    """A transport whose socket carries our bytes as they are (no TLS layer)."""
    return (
        transport.get_extra_info("sslcontext") is None
        and transport.get_extra_info("socket") is not None
        and isinstance(transport, asyncio.WriteTransport)
        and transport.get_write_buffer_size() == 0
    )


def _cork(sock: socket.socket, on: bool) -> None:
    """TCP_CORK where the platform has it (Linux); elsewhere the headers go alone."""
    if _TCP_CORK is not None:
        # A socket closing under us refuses the option; the send that follows reports it.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, _TCP_CORK, 1 if on else 0)


def _sendfile_now(sock_fd: int, fd: int, offset: int, count: int) -> int:
    """``os.sendfile`` into a non-blocking socket until it would block; the bytes sent.

    Only called when the transport's own buffer is empty, so these bytes
    cannot overtake anything it still holds.
    """
    sent = 0
    while sent < count:
        try:
            n = os.sendfile(sock_fd, fd, offset + sent, count - sent)
        except (BlockingIOError, InterruptedError):
            break
        if n == 0:
            raise ArtifactTruncated(f"artifact ended {count - sent} bytes early")
        sent += n
    return sent
