"""aiortc's side of a WebRTC viewer: RTP streams that send frames already cut into
RTP payloads.

aiortc negotiates the session (ICE, DTLS, SRTP keys, RTCP) and its ``RTCRtpSender``
would send whatever its track yields: it packetizes and serializes every packet
again for each viewer (aiortc ``rtcrtpsender.py``, ``_run_rtp``), which cost ten
viewers 40 % of the flow's CPU. A :class:`ViewerStream` replaces that one loop of
its sender: it takes the viewer's :class:`~mediaflow.live.rtp.RtpFrame` s, made once
for every viewer, writes only its own header in front of each shared payload and
hands the packet to the sender's DTLS transport to encrypt and send. The sender
keeps doing the rest (RTCP sender reports from the counters kept here, receiver
reports, the end of the stream).

It also answers the viewer's RTCP in place of the sender: a keyframe request
(PLI/FIR) restarts the viewer at the next keyframe, a NACK resends the packets kept
in a short history, and any RTCP from the viewer (receiver reports, about once a
second) is noted as a sign of life.

The stream sets private state of aiortc's sender (:data:`SENDER_STATE`), checked
when it is installed: an aiortc that moved it raises :class:`UnsupportedAiortc`.

Imports aiortc: the ``webrtc`` extra (``pip install 'mediaflow[webrtc]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiortc import MediaStreamTrack, RTCRtpSender
from aiortc.mediastreams import MediaStreamError
from av.frame import Frame

from mediaflow.live.fanout import QueueClosed, ViewerQueue
from mediaflow.live.rtp import (
    ABS_SEND_TIME_URI,
    MID_URI,
    RtpFrame,
    RtpHeader,
    abs_send_time,
    extension_block,
    leaves_dtls_role_open,
    ntp_time,
    playout_delay,
)
from mediaflow.live.rtp_wire import History, Sealed, Wire

log = logging.getLogger("mediaflow.live.webrtc")

HISTORY_PACKETS = 512  # to resend on a NACK: ~2 s of video at 2.7 Mbit/s (bench.live's)
# What a viewer's video may be held back to smooth its arrival (playout-delay): none.
PLAYOUT_DELAY_MS = (0, 0)
_PREFIX = "_RTCRtpSender__"
# The sender's state a stream keeps up to date: its RTP loop's start and end, and
# the counters its RTCP sender reports and statistics read.
_COUNTERS = ("ntp_timestamp", "rtp_timestamp", "octet_count", "packet_count")
SENDER_STATE = tuple(_PREFIX + name for name in ("rtp_started", "rtp_exited", *_COUNTERS))


class UnsupportedAiortc(RuntimeError):
    """This aiortc's sender keeps its state elsewhere."""


def answer_as_dtls_server(pc: Any, offer: str) -> bool:
    """Make ``pc``'s coming answer take DTLS's server side (``a=setup:passive``) when
    ``offer`` leaves the role open (:func:`~mediaflow.live.rtp.leaves_dtls_role_open`);
    call between ``setRemoteDescription`` and ``createAnswer``. Whether it did.

    aiortc answers as the DTLS client by default, and as a client it offers only ECDSA
    cipher suites: a peer whose certificate is RSA (GStreamer's ``webrtcbin``, and with
    it ``whipsink`` and ``whepsrc``) then fails the handshake with "no shared cipher".
    As the server, this side's ECDSA certificate sets the suite, whatever the peer's
    certificate is. RFC 5763 allows either answer; passive only waits for the peer to
    start the handshake once the answer reached it. Uses aiortc's private
    ``RTCDtlsTransport._role``: False, changing nothing, where it is not there."""
    if not leaves_dtls_role_open(offer):
        return False
    transports = {id(t.receiver.transport): t.receiver.transport for t in pc.getTransceivers()}
    if not transports or any(
        getattr(dtls, "_role", None) != "auto" or not hasattr(dtls, "_set_role")
        for dtls in transports.values()
    ):
        return False
    for dtls in transports.values():
        dtls._set_role("server")
    return True


class NamedTrack(MediaStreamTrack):
    """The track a viewer's transceiver is made with, so that the SDP names a stream
    for it (``a=msid``, which players use to group picture and sound). Nothing is
    read through it: its :class:`ViewerStream` sends the viewer's queue."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    async def recv(self) -> Frame:
        """Never a frame: aiortc's loop that would ask is replaced."""
        raise MediaStreamError


class Heard:
    """When the viewer was last heard from over RTCP (monotonic seconds)."""

    def __init__(self) -> None:
        self.at = time.monotonic()
        self.reports = 0

    def note(self) -> None:
        self.at = time.monotonic()
        self.reports += 1


class ViewerStream:
    """One viewer's RTP stream of one kind, sent from its queue (module doc). Made
    before the peer connection connects: its sender starts the loop then."""

    def __init__(self, sender: RTCRtpSender, queue: ViewerQueue, heard: Heard) -> None:
        missing = [name for name in SENDER_STATE if not hasattr(sender, name)]
        if missing:
            raise UnsupportedAiortc(
                f"this aiortc's RTCRtpSender has no {', '.join(missing)}: mediaflow's WebRTC"
                " view is made for aiortc 1.16"
            )
        self.sender = sender
        self.kind = "video" if queue.video else "audio"
        self.queue = queue
        self.heard = heard
        self.sent = 0  # packets
        self.resent = 0
        self.wire: Wire | None = None  # where its packets go, once connected
        self._fixed: list[tuple[int, bytes]] = []  # the extensions that never change
        self._abs_send_time_id: int | None = None
        self._history = History(HISTORY_PACKETS)
        self._ssrc = sender._ssrc
        self._started: asyncio.Event = getattr(sender, _PREFIX + "rtp_started")
        self._exited: asyncio.Event = getattr(sender, _PREFIX + "rtp_exited")
        send = sender.send
        handle: Callable[[Any], Awaitable[None]] = sender._handle_rtcp_packet

        async def send_with(parameters: Any) -> None:
            self._negotiated(parameters)
            await send(parameters)

        async def heard_then_handle(packet: Any) -> None:
            heard.note()
            await handle(packet)

        # aiortc looks these up on the instance each time: the peer connection calls
        # ``send`` once connected and ``send`` starts ``self._run_rtp``; the DTLS
        # transport routes RTCP to ``_handle_rtcp_packet``, which calls
        # ``self._send_keyframe()`` on PLI/FIR and ``self._retransmit(seq)`` on NACK.
        hooks = {
            "send": send_with,
            "_run_rtp": self._run,
            "_handle_rtcp_packet": heard_then_handle,
            "_send_keyframe": queue.restart,
            "_retransmit": self._resend,
        }
        for name, hook in hooks.items():
            setattr(sender, name, hook)

    def agree_playout_delay(self, ext_id: int | None) -> None:
        """The id the answer gave playout-delay
        (:func:`~mediaflow.live.rtp.answer_with_extension`): video then carries it."""
        if ext_id is not None and self.queue.video:
            self._fixed.append((ext_id, playout_delay(*PLAYOUT_DELAY_MS)))

    def _negotiated(self, parameters: Any) -> None:
        for extension in parameters.headerExtensions:
            if extension.uri == MID_URI and parameters.muxId:
                self._fixed.append((extension.id, parameters.muxId.encode()))
            elif extension.uri == ABS_SEND_TIME_URI:
                self._abs_send_time_id = extension.id

    def _extensions(self, ntp: int) -> bytes:
        elements = list(self._fixed)
        if self._abs_send_time_id is not None:
            elements.append((self._abs_send_time_id, abs_send_time(ntp)))
        return extension_block(elements)

    async def _run(self, codec: Any) -> None:
        """The sender's RTP loop, in place of aiortc's (module doc): whatever waits in
        the queue (a frame, a chunk's sound, more when the loop fell behind) goes out
        in one :meth:`Wire.send`."""
        self._started.set()
        transport = self.sender.transport
        header = RtpHeader(codec.payloadType, self._ssrc, secrets.randbits(32))
        sequence = secrets.randbits(16)
        octets = packets = 0
        wire: Wire | None = None
        try:
            while True:
                frames: list[RtpFrame] = await self.queue.take_all()
                if wire is None or not wire.same_pair(transport):
                    if wire is not None:
                        wire.close()
                    wire = self.wire = Wire.of(transport)
                ntp = ntp_time(time.time())
                out, timestamp = header.packets(frames, sequence, self._extensions(ntp))
                first, sequence = sequence, (sequence + len(out)) & 0xFFFF
                octets += sum(len(p) for frame in frames for p in frame.payloads)
                if wire is not None:
                    self._history.keep(first, wire.send(out))
                else:  # not connected yet, or an aiortc whose wire is not found
                    for packet in out:
                        await transport._send_rtp(packet)
                    self._history.keep(first, Sealed.of(out, encrypted=False))
                packets += len(out)
                self.sent = packets
                self._count(ntp, timestamp, octets, packets)
        except (asyncio.CancelledError, ConnectionError, QueueClosed):
            pass
        except Exception:
            log.exception("a WebRTC viewer's %s stream stopped", self.kind)
        finally:
            if wire is not None:
                wire.close()
            self._exited.set()

    def _count(self, ntp: int, timestamp: int, octets: int, packets: int) -> None:
        """What the sender's RTCP sender reports say: the last packet's wall clock and
        RTP time, and what was sent."""
        for name, value in zip(_COUNTERS, (ntp, timestamp, octets, packets), strict=True):
            setattr(self.sender, _PREFIX + name, value)

    async def _resend(self, sequence: int) -> None:
        found = self._history.find(sequence)
        if found is None:
            return  # older than the history: the viewer's next keyframe request repairs it
        packet, encrypted = found
        with contextlib.suppress(ConnectionError):
            if not encrypted:
                await self.sender.transport._send_rtp(bytes(packet))
            elif self.wire is not None:
                self.wire.resend(packet)
            else:
                return  # its wire is gone: a new pair has new packets
            self.resent += 1
