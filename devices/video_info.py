"""What an opened video input is: one description for decoding and copying inputs. Pure."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import av
from av.container.streams import StreamContainer

from devices.video_spec import LIVE_KINDS, SourceKind


class DemuxSource(Protocol):
    """What :class:`VideoInput` needs of an open input: PyAV's ``InputContainer``, or a
    test's wrapper around one (to inject a fault)."""

    streams: StreamContainer
    duration: int | None

    def demux(self, *args: Any) -> Iterator[av.Packet[Any]]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class VideoInfo:
    """What was opened. ``fps`` is the stream's nominal rate, when it has one."""

    spec: str
    kind: SourceKind
    width: int
    height: int
    fps: float | None
    codec: str
    pix_fmt: str | None
    is_live: bool
    passthrough: bool
    duration: float | None


def video_info(
    spec: str, container: DemuxSource, kind: SourceKind, *, passthrough: bool
) -> VideoInfo:
    """What ``container``'s first video stream is (no I/O)."""
    stream = container.streams.video[0]
    codec = stream.codec_context
    rate = stream.average_rate or stream.guessed_rate
    return VideoInfo(
        spec=spec,
        kind=kind,
        width=codec.width,
        height=codec.height,
        fps=float(rate) if rate else None,
        codec=codec.name,
        pix_fmt=codec.pix_fmt,
        is_live=kind in LIVE_KINDS,
        passthrough=passthrough,
        duration=container.duration / av.time_base if container.duration else None,
    )
