"""aiortc's side of a WebRTC viewer: tracks that hand it packets already encoded.

aiortc's ``RTCRtpSender`` asks its track for the next item; for an ``av.Packet`` it
calls its codec's ``pack`` (RTP packetization only: H.264's FU-A/STAP-A, RFC 6184;
Opus as it is) instead of encoding (aiortc ``rtcrtpsender.py``,
``_next_encoded_frame``). A :class:`PacketTrack` yields the packets of a viewer's
:class:`~mediaflow.live.fanout.ViewerQueue`, so the video a viewer gets is the
camera's own H.264 and aiortc never runs an encoder for it.

:func:`follow_sender` hooks the two RTCP events aiortc keeps to itself: a keyframe
request (PLI/FIR, which aiortc turns into a flag only its own encoders read) restarts
the viewer at the next keyframe, and any RTCP from the viewer (its receiver reports,
about once a second) is noted as a sign of life.

Imports aiortc: the ``webrtc`` extra (``pip install 'mediaflow[webrtc]'``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import av
from aiortc import MediaStreamTrack, RTCRtpSender
from aiortc.mediastreams import MediaStreamError

from mediaflow.live.fanout import QueueClosed, ViewerQueue


class PacketTrack(MediaStreamTrack):
    """A track whose items are a viewer queue's encoded packets."""

    def __init__(self, kind: str, queue: ViewerQueue) -> None:
        super().__init__()
        self.kind = kind
        self.queue = queue

    async def recv(self) -> av.Packet[Any]:
        """The next packet; raises ``MediaStreamError`` (aiortc's end of a track) once
        the viewer's queue is closed."""
        if self.readyState != "live":
            raise MediaStreamError
        try:
            packet: av.Packet[Any] = await self.queue.get()
        except QueueClosed:
            self.stop()
            raise MediaStreamError from None
        return packet

    def stop(self) -> None:
        self.queue.close()
        super().stop()


class Heard:
    """When the viewer was last heard from over RTCP (monotonic seconds)."""

    def __init__(self) -> None:
        self.at = time.monotonic()
        self.reports = 0

    def note(self) -> None:
        self.at = time.monotonic()
        self.reports += 1


def follow_sender(sender: RTCRtpSender, queue: ViewerQueue, heard: Heard) -> None:
    """Hook ``sender``'s RTCP (module doc). aiortc looks both methods up on the
    instance each time (``RTCDtlsTransport`` routes RTCP to
    ``recipient._handle_rtcp_packet``; the sender calls ``self._send_keyframe()``)."""
    handle: Callable[[Any], Awaitable[None]] = sender._handle_rtcp_packet

    async def heard_then_handle(packet: Any) -> None:
        heard.note()
        await handle(packet)

    setattr(sender, "_handle_rtcp_packet", heard_then_handle)  # noqa: B010 - an instance hook
    setattr(sender, "_send_keyframe", queue.restart)  # noqa: B010 - an instance hook
