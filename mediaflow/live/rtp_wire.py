"""A WebRTC viewer's packets onto the wire: encrypted, then sent a frame at a time.

Sending one datagram is one system call, and on this kind of machine the call costs
more than everything Python does for the packet (BENCHMARKS.md, live). Linux sends a
run of equal-sized datagrams in one call when the buffer carries their size as
``UDP_SEGMENT`` (generic segmentation offload, Linux 4.18): a frame's RTP packets are
all one size but the last (its FU-A fragments), so a frame goes in one or two calls.

:meth:`Wire.of` finds, once ICE chose its pair and DTLS keyed SRTP, the viewer's
SRTP session and the socket and address aiortc (through aioice) sends it on; those
are private state of aiortc's and aioice's (checked: None when they moved, and the
caller sends through aiortc). Segmentation is refused by some kernels and sockets:
the first refusal turns it off for that wire, which then sends datagram by datagram
through the socket's asyncio transport.
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any

log = logging.getLogger("mediaflow.live.webrtc")

UDP_SEGMENT = 103  # linux/udp.h: the segment size of a buffer sent in one call
MAX_SEGMENTS = 64  # the kernel's limit (UDP_MAX_SEGMENTS)
MAX_BATCH_BYTES = 60_000  # under a UDP datagram's 65,507 bytes of payload


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


class Wire:
    """One viewer's SRTP session and UDP socket (module doc)."""

    def __init__(self, protect: Any, transport: Any, address: Any) -> None:
        self.protect = protect
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
            return cls(dtls._tx_srtp.protect, pair.protocol.transport, pair.remote_addr)
        except (AttributeError, OSError):  # moved, or no descriptor left to dup
            return None

    def same_pair(self, dtls: Any) -> bool:
        """Whether ``dtls`` still sends on this wire's pair."""
        try:
            pair = dtls.transport._connection._nominated.get(1)
        except AttributeError:
            return False
        return pair is not None and pair.protocol.transport is self.transport

    def send(self, packets: list[bytes]) -> None:
        """Encrypt ``packets`` (RTP, in order) and send them. Raises ``ConnectionError``
        once the socket is closed."""
        if self.transport.is_closing():
            raise ConnectionError("the viewer's socket is closed")
        sealed = [self.protect(packet) for packet in packets]
        if not self._segmenting:
            for packet in sealed:
                self._send_one(packet)
            return
        # Behind datagrams asyncio still holds for the socket, ours would overtake them.
        queued = self.transport.get_write_buffer_size() > 0
        for start, end in batches([len(p) for p in sealed]):
            if end - start > 1 and not queued and self._send_segmented(sealed[start:end]):
                continue
            for packet in sealed[start:end]:
                self._send_one(packet)

    def _send_segmented(self, run: list[bytes]) -> bool:
        assert self._socket is not None
        size = len(run[0]).to_bytes(2, sys.byteorder)
        try:
            self._socket.sendmsg([b"".join(run)], [(socket.SOL_UDP, UDP_SEGMENT, size)], 0,
                                 self.address)  # fmt: skip
        except BlockingIOError:
            return False  # the socket's buffer is full: asyncio's transport queues them
        except OSError as exc:
            log.info("UDP segmentation refused (%s): one datagram a call from now", exc)
            self._segmenting = False
            return False
        self.calls += 1
        return True

    def _send_one(self, packet: bytes) -> None:
        self.transport.sendto(packet, self.address)
        self.calls += 1

    def close(self) -> None:
        """Let go of this wire's handle on the socket (the socket stays aiortc's)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
