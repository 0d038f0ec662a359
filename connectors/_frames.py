"""Converting frames on an encoding thread, without sharing PyAV's converter.

``VideoFrame.reformat`` keeps one swscale context *on the frame* and reuses it. The
capture loop hands the same frame to the JPEG lane and to the segment lane; two lanes
converting it at once through that shared context deadlock (seen here within seconds,
e.g. a camera with a resize and segments on). Each :class:`FrameConverter` owns its
own context instead, so a shared frame is only ever read by two threads. (The segment
lane also stamps ``pts``/``pict_type`` on a frame it did not need to convert; the JPEG
lane does not depend on them.)
"""

from __future__ import annotations

import av
from av.video.reformatter import VideoReformatter


class FrameConverter:
    """A private swscale context; one per thread. Blocks while it converts."""

    def __init__(self) -> None:
        self._reformatter = VideoReformatter()

    def convert(self, frame: av.VideoFrame, width: int, height: int, fmt: str) -> av.VideoFrame:
        """``frame`` at ``width`` x ``height`` in ``fmt``: itself when it already is,
        else a new frame. Single-threaded: the lane is the unit of parallelism."""
        return self._reformatter.reformat(frame, width=width, height=height, format=fmt, threads=1)
