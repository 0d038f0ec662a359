"""System calls on a non-blocking socket the event loop's transport owns.

What the lean artifact responses (:mod:`mediaflow.server.transfer`) need below
asyncio: a ``send`` with ``MSG_MORE``, ``sendfile`` until the socket is full,
and a wait for room on a descriptor the loop would not watch directly.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import os
import socket
from collections.abc import Callable


class ArtifactTruncated(OSError):
    """An artifact file ended before its recorded size: the response cannot be completed."""


async def writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Wait until ``fd`` can take more bytes (or has an error the next send reports)."""
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_writer(fd)


def _libc_send() -> Callable[[int, bytes, int, int], int] | None:
    """libc's ``send(2)``, for the one flag Python's socket objects would need a
    socket object per request for (building one costs a ``getsockname``)."""
    if not hasattr(socket, "MSG_MORE"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        send = libc.send
    except (OSError, AttributeError):
        return None
    # No argtypes: ints and bytes convert by ctypes' defaults (int, char *), and
    # per-argument converters cost more than the call itself. libffi widens an int
    # argument to the register, so a (small, positive) length arrives as a size_t.
    send.restype = ctypes.c_ssize_t
    return send


_SEND = _libc_send()
_MSG_MORE: int = getattr(socket, "MSG_MORE", 0)


def send_more(sock_fd: int, data: bytes) -> int:
    """Send ``data`` marked "more follows" (it waits for the next send to leave);
    the bytes the socket took. 0 where that is unavailable: the caller writes them."""
    if _SEND is None:
        return 0
    sent = _SEND(sock_fd, data, len(data), _MSG_MORE)
    if sent >= 0:
        return sent
    code = ctypes.get_errno()
    if code in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
        return 0
    raise OSError(code, os.strerror(code))


def sendfile_now(sock_fd: int, fd: int, offset: int, count: int) -> int:
    """``os.sendfile`` into a non-blocking socket until it would block; the bytes sent."""
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
