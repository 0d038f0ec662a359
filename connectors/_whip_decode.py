"""A publisher's encoded frames on their way to aiortc's decoding thread, bounded.

aiortc's ``RTCRtpReceiver`` hands each frame it reassembles to a decoding thread
through a ``queue.Queue`` without a bound (``rtcrtpreceiver.py``): a publisher that
sends more than this machine decodes (a flood, or 4K at 60 fps from OBS on a small
box) would grow it until memory runs out. :func:`bound_decoding` gives each receiver
of a peer connection a :class:`LatestFrames` instead, before it connects.

:class:`LatestFrames` keeps at most ``limit`` frames. One that finds it full drops
what waits (it is older than live by the whole queue); video then drops frames up
to the next keyframe, since nothing decodes without the pictures it refers to, and
sets the receiver's decoding-error flag, on which aiortc asks the publisher for a
keyframe (RTCP PLI). Sound frames stand alone: only the old ones go. The end of the
stream (``None``) always goes in.

Sets private state of aiortc's receiver (:data:`RECEIVER_STATE`); a receiver
without it is left as it is, with a warning.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from mediaflow.live.fanout import Admit, admit
from mediaflow.live.h264 import BitstreamError, is_keyframe

log = logging.getLogger(__name__)

VIDEO_FRAMES = 30  # a second at 30 fps
AUDIO_FRAMES = 100  # two seconds of 20 ms Opus
_PREFIX = "_RTCRtpReceiver__"
RECEIVER_STATE = (_PREFIX + "decoder_queue", _PREFIX + "decoder_error", _PREFIX + "kind")


def starts_picture(codec: str, data: bytes) -> bool:
    """Whether a decoder can start at this encoded frame of ``codec`` (aiortc's codec
    name). Pure."""
    if codec == "H264":
        try:
            return is_keyframe(data)
        except BitstreamError:
            return False
    if codec == "VP8":  # RFC 6386 §9.1: the frame tag's first bit is 0 on a key frame
        return bool(data) and data[0] & 1 == 0
    return True


class LatestFrames(queue.Queue[Any]):
    """A receiver's decoding queue with a bound (module doc)."""

    def __init__(self, limit: int, *, video: bool, ask_keyframe: Callable[[], None]) -> None:
        super().__init__()
        self.limit = limit
        self.video = video
        self.ask_keyframe = ask_keyframe
        self.dropped = 0
        self.max_depth = 0
        self.waiting_keyframe = False  # after a flush: frames wait for a keyframe

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if item is not None and not self._admit(item):
            return
        super().put(item, block, timeout)

    def _admit(self, item: tuple[Any, Any]) -> bool:
        codec, frame = item
        with self.mutex:  # the decoding thread takes from the same deque
            depth = len(self.queue)
            # Only a full queue or one waiting for a keyframe needs to know (a parse).
            asks = not self.video or depth >= self.limit or self.waiting_keyframe
            keyframe = asks and starts_picture(codec.name, bytes(frame.data))
            decision = admit(
                depth=depth,
                capacity=self.limit,
                keyframe=keyframe,
                waiting_keyframe=self.waiting_keyframe,
            )
            if decision is Admit.DROP:
                self.dropped += 1
                return False
            if decision is Admit.FLUSH:
                self.dropped += depth
                self.queue.clear()
                if self.video:
                    self.ask_keyframe()
                    if not keyframe:
                        self.waiting_keyframe = True
                        self.dropped += 1
                        return False
            self.waiting_keyframe = False
            self.max_depth = max(self.max_depth, len(self.queue) + 1)
        return True


def bound_decoding(pc: Any) -> list[LatestFrames]:
    """Give each receiver of ``pc`` (an aiortc ``RTCPeerConnection``) a
    :class:`LatestFrames`: after ``setRemoteDescription``, before it connects (its
    decoding thread takes the queue it has then). The queues given."""
    bounded: list[LatestFrames] = []
    for transceiver in pc.getTransceivers():
        receiver = transceiver.receiver
        if not all(hasattr(receiver, name) for name in RECEIVER_STATE):
            log.warning("this aiortc's receiver keeps its decoding queue elsewhere: unbounded")
            continue
        error: threading.Event = getattr(receiver, _PREFIX + "decoder_error")
        video = getattr(receiver, _PREFIX + "kind") == "video"
        frames = LatestFrames(
            VIDEO_FRAMES if video else AUDIO_FRAMES, video=video, ask_keyframe=error.set
        )
        setattr(receiver, _PREFIX + "decoder_queue", frames)
        bounded.append(frames)
    return bounded
