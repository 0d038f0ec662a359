"""A WebRTC viewer's packets onto the wire: encrypted, then sent a frame at a time.

Sending one datagram is one system call, and on this kind of machine the call costs
more than everything Python does for the packet (BENCHMARKS.md, live). Linux sends a
run of equal-sized datagrams in one call when the buffer carries their size as
``UDP_SEGMENT`` (generic segmentation offload, Linux 4.18): a frame's RTP packets are
all one size but the last (its FU-A fragments), so a frame goes in one call per
NAL unit (slice) it carries, and a microphone chunk's Opus packets in one (constant
bitrate: one size).

The packets are encrypted one after the other into one buffer, each where the one
before ended (libsrtp encrypts in place and appends its tag), so a run of them is
already the buffer a segmented send wants: no packet is copied out and joined
again. That calls libsrtp through pylibsrtp's bindings, below its ``Session.protect``
(which copies each packet in and out); where those bindings are not as expected,
each packet goes through ``protect``.

:meth:`Wire.of` finds, once ICE chose its pair and DTLS keyed SRTP, the viewer's
SRTP session and the socket and address aiortc (through aioice) sends it on; those
are private state of aiortc's and aioice's (checked: None when they moved, and the
caller sends through aiortc). Segmentation is refused by some kernels and sockets:
the first refusal turns it off for that wire, which then sends datagram by datagram
through the socket's asyncio transport.
"""

from __future__ import annotations

import importlib
import logging
import socket
import sys
from collections import deque
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

_ffi: Any = None
_lib: Any = None
try:  # pylibsrtp's cffi bindings of libsrtp 2 (module doc)
    _binding = importlib.import_module("pylibsrtp._binding")
    _ffi, _lib = _binding.ffi, _binding.lib
except (ImportError, AttributeError):  # pragma: no cover - then protect() each packet
    pass

log = logging.getLogger("mediaflow.live.webrtc")

UDP_SEGMENT = 103  # linux/udp.h: the segment size of a buffer sent in one call
MAX_SEGMENTS = 64  # the kernel's limit (UDP_MAX_SEGMENTS)
MAX_BATCH_BYTES = 60_000  # under a UDP datagram's 65,507 bytes of payload, tags and all
MAX_TRAILER = 16 + 128  # what libsrtp may append to a packet: its tag and an MKI


def batches(sizes: list[int]) -> list[tuple[int, int]]:
    """``sizes`` (of the packets to send, in order) cut into runs a single segmented
    send can carry: all of a run's packets one size but its last, which may be
    shorter; at most ``MAX_SEGMENTS`` of them and ``MAX_BATCH_BYTES`` in all. The runs
    as ``(start, end)`` indices; a run of one is sent as a plain datagram. Pure."""
    runs: list[tuple[int, int]] = []
    start = 0
    while start < len(sizes):
        size, end, total = sizes[start], start + 1, sizes[start]
        while end < len(sizes) and end - start < MAX_SEGMENTS:
            if total + sizes[end] > MAX_BATCH_BYTES or sizes[end] > size:
                break
            total += sizes[end]
            end += 1
            if sizes[end - 1] < size:
                break  # a shorter one ends the run
        runs.append((start, end))
        start = end
    return runs


@dataclass(frozen=True, slots=True)
class Sealed:
    """Packets lying one after the other in one buffer, encrypted unless
    ``encrypted`` is False: packet ``i`` ends at ``ends[i]`` and begins where the one
    before ended."""

    view: memoryview
    ends: tuple[int, ...]
    encrypted: bool = True

    @classmethod
    def of(cls, packets: list[bytes], *, encrypted: bool) -> Sealed:
        return cls(memoryview(b"".join(packets)), tuple(accumulate(map(len, packets))), encrypted)

    def __len__(self) -> int:
        return len(self.ends)

    def span(self, start: int, end: int) -> memoryview:
        """Packets ``start`` to ``end - 1`` as one view."""
        return self.view[self.ends[start - 1] if start else 0 : self.ends[end - 1]]

    def sizes(self) -> list[int]:
        return [end - begin for begin, end in zip((0, *self.ends), self.ends, strict=False)]


class History:
    """The packets last sent, encrypted, to send again on a NACK: at most ``limit``,
    kept as the :class:`Sealed` runs they were sent in."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._runs: deque[tuple[int, Sealed]] = deque()  # (first sequence number, run)
        self._held = 0

    def keep(self, first: int, sealed: Sealed) -> None:
        """``sealed`` was sent numbered from ``first``."""
        self._runs.append((first, sealed))
        self._held += len(sealed)
        while self._held - len(self._runs[0][1]) >= self.limit:
            self._held -= len(self._runs.popleft()[1])

    @property
    def newest(self) -> int | None:
        """The sequence number of the last packet kept, if any."""
        if not self._runs:
            return None
        first, sealed = self._runs[-1]
        return (first + len(sealed) - 1) & 0xFFFF

    def find(self, sequence: int) -> tuple[memoryview, bool] | None:
        """The packet sent as ``sequence`` and whether it is kept encrypted, if still
        held (newest runs first)."""
        for first, sealed in reversed(self._runs):
            index = (sequence - first) & 0xFFFF
            if index < len(sealed):
                return sealed.span(index, index + 1), sealed.encrypted
        return None


class Sealer:
    """Encrypts packets into one buffer (module doc). ``session``: a pylibsrtp
    ``Session``."""

    def __init__(self, session: Any) -> None:
        self._protect = session.protect
        handle = getattr(session, "_srtp", None)
        self._srtp = handle[0] if handle is not None and _lib is not None else None
        self._length: Any = _ffi.new("int *") if _ffi is not None else None

    def seal(self, packets: list[bytes]) -> Sealed:
        """``packets`` (RTP, in order) encrypted. Raises ``RuntimeError`` if libsrtp
        refuses one."""
        if self._srtp is None:
            return Sealed.of([self._protect(packet) for packet in packets], encrypted=True)
        buffer = _ffi.new("char[]", sum(map(len, packets)) + MAX_TRAILER * len(packets))
        view = memoryview(_ffi.buffer(buffer))
        length, srtp, protect = self._length, self._srtp, _lib.srtp_protect
        ends, at = [], 0
        for packet in packets:
            view[at : at + len(packet)] = packet
            length[0] = len(packet)
            status = protect(srtp, buffer + at, length)
            if status:
                raise RuntimeError(f"libsrtp refused to protect a packet (status {status})")
            at += length[0]
            ends.append(at)
        return Sealed(view[:at], tuple(ends))


class Wire:
    """One viewer's SRTP session and UDP socket (module doc)."""

    def __init__(self, session: Any, transport: Any, address: Any) -> None:
        self.sealer = Sealer(session)
        self.transport = transport  # asyncio's datagram transport of the ICE pair
        self.address = address
        self.calls = 0  # system calls made (statistics, tests)
        self._segmenting = sys.platform == "linux"
        self._socket: socket.socket | None = None
        if self._segmenting:
            raw = transport.get_extra_info("socket")
            # A handle of our own on the same socket (a dup of its descriptor):
            # asyncio's wrapper of it has no sendmsg.
            self._socket = socket.fromfd(raw.fileno(), raw.family, raw.type, raw.proto)

    @classmethod
    def of(cls, dtls: Any) -> Wire | None:
        """The wire of aiortc's ``RTCDtlsTransport`` ``dtls``, or None before it is
        connected, when aiortc or aioice keep this state elsewhere, or when the
        socket cannot be had (then the caller sends through aiortc)."""
        try:
            if dtls.state != "connected":
                return None
            pair = dtls.transport._connection._nominated.get(1)
            if pair is None:
                return None
            return cls(dtls._tx_srtp, pair.protocol.transport, pair.remote_addr)
        except (AttributeError, OSError):  # moved, or no descriptor left to dup
            return None

    def same_pair(self, dtls: Any) -> bool:
        """Whether ``dtls`` still sends on this wire's pair."""
        try:
            pair = dtls.transport._connection._nominated.get(1)
        except AttributeError:
            return False
        return pair is not None and pair.protocol.transport is self.transport

    def send(self, packets: list[bytes]) -> Sealed:
        """Encrypt ``packets`` (RTP, in order) and send them; what was sent, to send
        again (:meth:`resend`). Raises ``ConnectionError`` once the socket is closed."""
        if self.transport.is_closing():
            raise ConnectionError("the viewer's socket is closed")
        sealed = self.sealer.seal(packets)
        # Behind datagrams asyncio still holds for the socket, ours would overtake them.
        if not self._segmenting or self.transport.get_write_buffer_size() > 0:
            self._send_each(sealed, 0, len(sealed))
            return sealed
        sizes = sealed.sizes()
        for start, end in batches(sizes):
            if not self._send_run(sealed.span(start, end), sizes[start], end - start):
                self._send_each(sealed, start, end)
        return sealed

    def resend(self, packet: memoryview) -> None:
        """Send an encrypted packet again (a viewer's NACK). Raises ``ConnectionError``
        once the socket is closed."""
        if self.transport.is_closing():
            raise ConnectionError("the viewer's socket is closed")
        self._send_one(packet)

    def _send_run(self, run: memoryview, size: int, count: int) -> bool:
        """``count`` packets of ``size`` bytes (the last may be shorter) in one call:
        a segmented datagram, or a plain one for one packet. False when the socket's
        buffer is full (asyncio's transport then queues them) or the kernel refuses
        segmentation (refused from then on)."""
        assert self._socket is not None
        try:
            if count == 1:
                self._socket.sendto(run, self.address)
            else:
                segment = size.to_bytes(2, sys.byteorder)
                self._socket.sendmsg([run], [(socket.SOL_UDP, UDP_SEGMENT, segment)], 0,
                                     self.address)  # fmt: skip
        except BlockingIOError:
            return False
        except OSError as exc:
            if count == 1:
                return False  # asyncio's transport sends it, and reports what is wrong
            log.info("UDP segmentation refused (%s): one datagram a call from now", exc)
            self._segmenting = False
            return False
        self.calls += 1
        return True

    def _send_each(self, sealed: Sealed, start: int, end: int) -> None:
        """Packets ``start`` to ``end - 1`` a datagram each, through asyncio's transport."""
        for i in range(start, end):
            self._send_one(sealed.span(i, i + 1))

    def _send_one(self, packet: memoryview) -> None:
        self.transport.sendto(bytes(packet), self.address)
        self.calls += 1

    def close(self) -> None:
        """Let go of this wire's handle on the socket (the socket stays aiortc's)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
