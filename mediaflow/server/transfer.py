"""Sending a span of an open artifact with as few system calls as the socket allows.

:class:`SpanResponse` is a decided 200 or 206 (status, span, headers). It
takes one of two ways, chosen when aiohttp prepares it:

**lean**, for a GET on a plain TCP transport (no TLS) with nothing queued:
the status line and headers are serialised here, and

- a span up to ``MEDIAFLOW_INLINE_MAX`` (16 KiB) is read with ``os.pread``
  and leaves with its headers in one write (one system call, one segment);
- a larger span (with ``MEDIAFLOW_SENDFILE`` on, the default) is sent with
  ``os.sendfile`` right after its headers, which go with ``MSG_MORE`` on
  Linux so that they wait in the kernel for the body: one TCP push for both,
  and two system calls in all (``TCP_CORK`` costs two more). Where
  ``MSG_MORE`` is missing the headers leave as a segment of their own, as
  nginx does with ``tcp_nopush off``.

The socket is non-blocking, so a span that fits its buffer (a 64 KiB range)
costs no future, no thread and no reader pause. What the socket would not
take at once follows by ``os.sendfile`` each time it has room again (watched
through a duplicate descriptor: uvloop has no native ``loop.sendfile`` and
refuses to watch a transport's own). As in nginx without thread pools, a
page missing from the page cache is read synchronously. aiohttp's payload
writer never sees the lean bytes; the response reports them itself
(``body_length``, ``keep_alive``).

**aiohttp's own** for everything else (HEAD, TLS, bytes already queued on
the transport, a large span with sendfile off): ``StreamResponse.prepare``
writes the headers, and the body follows in 256 KiB chunks read by
``os.pread`` in a worker thread (backpressure by the writer's drain).

:class:`TransferStats` counts body bytes per way, for tests and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import formatdate

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11

from mediaflow.server.filecache import ArtifactCache, OpenArtifact
from mediaflow.server.header_block import HeaderBlock, check_header
from mediaflow.server.sockets import ArtifactTruncated, send_more, sendfile_now, writable

CHUNK = 256 * 1024


@dataclass
class TransferStats:
    """Body bytes sent by each way since the app started."""

    inline: int = 0  # lean: read and written with the headers
    direct: int = 0  # lean: os.sendfile right after the headers
    resumed: int = 0  # lean: os.sendfile again each time the socket had room
    chunked: int = 0  # read in a worker thread and written through aiohttp


class PrepareHook:
    """An ``on_response_prepare`` receiver whose work is synchronous.

    aiohttp awaits it like any receiver; the lean way calls :attr:`now`
    directly when it is the app's only one (a signal dispatch costs more than
    logging and counting the response).
    """

    __slots__ = ("now",)

    def __init__(self, now: Callable[[web.BaseRequest, web.StreamResponse], None]) -> None:
        self.now = now

    async def __call__(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        self.now(request, response)


class SpanResponse(web.StreamResponse):
    """A 200 or 206 whose body is ``length`` bytes of ``entry`` from ``start``.

    ``fixed`` are the artifact's header lines; ``content_type`` and
    ``content_range`` (a 206's) this response's. They join ``headers`` only
    when aiohttp writes the head: on the lean way, ``on_response_prepare``
    hooks see just the headers they add themselves. Holds a reference on the
    cache entry until the transfer ends (or the response is dropped unsent),
    so eviction never closes a file mid-send.
    """

    def __init__(
        self,
        *,
        status: int,
        content_type: str,
        content_range: str | None,
        fixed: HeaderBlock,
        cache: ArtifactCache,
        entry: OpenArtifact,
        start: int,
        length: int,
        sendfile: bool,
        inline_max: int,
        stats: TransferStats,
    ) -> None:
        # Before the base class runs: older aiohttp (3.9) reads ``prepared`` from
        # its own ``__init__`` and setters.
        self._lean_keep_alive: bool | None = None  # set once the lean way took the response
        super().__init__(status=status)
        self.content_length = length
        self._span_type = content_type
        self._span_range = content_range
        self._fixed = fixed
        self._cache = cache
        self._entry: OpenArtifact | None = entry
        self._span_start = start
        self._span_length = length
        self._use_sendfile = sendfile
        self._inline = length <= inline_max
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

    # What aiohttp reads back from a response it did not write itself.

    @property
    def keep_alive(self) -> bool | None:
        lean = self._lean_keep_alive
        return super().keep_alive if lean is None else lean

    @property
    def prepared(self) -> bool:
        return self._lean_keep_alive is not None or super().prepared

    @property
    def body_length(self) -> int:
        return self._span_length if self._lean_keep_alive is not None else super().body_length

    async def write_eof(self, data: bytes = b"") -> None:
        if self._lean_keep_alive is None:
            await super().write_eof(data)

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self._lean_keep_alive is not None:
            return None
        entry = self._entry
        if entry is None:  # prepared already (or failed): aiohttp's answer
            return await super().prepare(request)
        try:
            transport = request.transport
            if request.method == "HEAD":
                self._add_headers()
                return await super().prepare(request)
            if transport is None or transport.is_closing():
                raise ConnectionResetError("connection lost before the body was sent")
            if self._inline or self._use_sendfile:
                sock = transport.get_extra_info("socket")
                if (
                    sock is not None
                    and transport.get_extra_info("sslcontext") is None
                    and transport.get_write_buffer_size() == 0
                ):
                    await self._send_lean(request, transport, sock.fileno(), entry)
                    return None
            self._add_headers()
            writer = await super().prepare(request)
            await self._send_chunks(self.write, entry, self._span_start, self._span_length)
            await super().write_eof()
            return writer
        finally:
            self._release()

    def _add_headers(self) -> None:
        headers = self.headers
        headers.extend(self._fixed.pairs)
        headers["Content-Type"] = self._span_type
        if self._span_range is not None:
            headers["Content-Range"] = self._span_range

    async def _send_lean(
        self,
        request: web.BaseRequest,
        transport: asyncio.WriteTransport,
        sock_fd: int,
        entry: OpenArtifact,
    ) -> None:
        """Headers and body on a plain socket with nothing queued (see the module doc)."""
        keep_alive = request.keep_alive
        # The hooks aiohttp's prepare would run (logging, metrics, CORS headers).
        hooks = request.app.on_response_prepare  # type: ignore[attr-defined]
        if len(hooks) == 1 and isinstance(hooks[0], PrepareHook):
            hooks[0].now(request, self)
        else:
            await hooks.send(request, self)
        self._lean_keep_alive = keep_alive
        head = self._head(request.version, keep_alive)
        offset, remaining = self._span_start, self._span_length
        if self._inline:
            data = os.pread(entry.fd, remaining, offset)
            if len(data) != remaining:
                raise ArtifactTruncated(f"{entry.path} is shorter than its recorded size")
            transport.write(head + data)
            self._stats.inline += remaining
            return
        sent = send_more(sock_fd, head) if remaining else 0
        if sent < len(head):
            transport.write(head[sent:])
        if transport.get_write_buffer_size() == 0:
            # Nothing queued ahead of these bytes, so they cannot overtake anything.
            sent = sendfile_now(sock_fd, entry.fd, offset, remaining)
            self._stats.direct += sent
            offset += sent
            remaining -= sent
        if remaining:
            await self._send_rest(sock_fd, transport, entry, offset, remaining)

    async def _send_rest(
        self,
        sock_fd: int,
        transport: asyncio.WriteTransport,
        entry: OpenArtifact,
        offset: int,
        remaining: int,
    ) -> None:
        """The rest of the span, by ``os.sendfile`` each time the socket has room again."""
        loop = asyncio.get_running_loop()
        # The loop refuses to watch a descriptor its transport owns (uvloop); a
        # duplicate names the same socket, and stays ours even if the transport
        # closes its own meanwhile. Nothing else writes to the socket: aiohttp
        # answers a connection's requests one at a time.
        sock = os.dup(sock_fd)
        try:
            while remaining:
                await writable(loop, sock)
                if transport.is_closing():
                    raise ConnectionResetError("connection closed during the body")
                if transport.get_write_buffer_size():
                    continue  # what the transport holds (refused header bytes) goes first
                sent = sendfile_now(sock, entry.fd, offset, remaining)
                self._stats.resumed += sent
                offset += sent
                remaining -= sent
        finally:
            os.close(sock)

    async def _send_chunks(
        self,
        write: Callable[[bytes], Awaitable[None]],
        entry: OpenArtifact,
        offset: int,
        remaining: int,
    ) -> None:
        loop = asyncio.get_running_loop()
        while remaining:
            data = await loop.run_in_executor(
                None, os.pread, entry.fd, min(CHUNK, remaining), offset
            )
            if not data:
                raise ArtifactTruncated(f"{entry.path} ended {remaining} bytes early")
            await write(data)
            self._stats.chunked += len(data)
            offset += len(data)
            remaining -= len(data)

    def _head(self, version: tuple[int, int], keep_alive: bool) -> bytes:
        """Status line and headers, as aiohttp would write them (RFC 9112 section 9.3)."""
        parts = [self._fixed.head_start(version, self.status, self.reason, self._span_type)]
        if self._span_range is not None:
            parts.append(f"Content-Range: {self._span_range}\r\n")
        headers = self.headers
        if len(headers) == 1:  # Content-Length alone: no hook added any
            parts.append(f"Content-Length: {self._span_length}\r\n")
        else:
            for name, value in headers.items():
                check_header(name, value)
                parts.append(f"{name}: {value}\r\n")
        parts.append(_date_and_server())
        if version != HttpVersion11:
            parts.append("Connection: keep-alive\r\n\r\n" if keep_alive else "\r\n")
        else:
            parts.append("\r\n" if keep_alive else "Connection: close\r\n\r\n")
        return "".join(parts).encode("utf-8")


_date_second = -1
_date_lines = ""


def _date_and_server() -> str:
    """The ``Date`` and ``Server`` lines, formatted once per second."""
    global _date_second, _date_lines
    now = int(time.time())
    if now != _date_second:
        _date_lines = f"Date: {formatdate(now, usegmt=True)}\r\nServer: {SERVER_SOFTWARE}\r\n"
        _date_second = now
    return _date_lines
