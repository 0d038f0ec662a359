"""How a video source is opened, and what its run emits: the camera options.

:class:`VideoRequest` opens a source: a decoding :class:`~devices.VideoInput`, or a
:class:`~devices.PacketInput` when its H.264/H.265 is copied (``codec``, ``copy``,
no resize). :class:`VideoOptions` are the emission half (JPEG rate and quality,
segments, the live view). Both are checked by :mod:`connectors.camera`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from connectors._options import COPIED_BY, Codec
from devices import PacketInput, VideoInput, open_video
from devices.video_spec import NETWORK_TIMEOUT_S, parse_video_spec
from mediaflow import Context

CAPTURE_KINDS = frozenset({"v4l2", "avfoundation", "dshow"})


@dataclass(frozen=True)
class VideoRequest:
    """How to open a video source; ``size`` is asked of a capture device and applied
    as a resize to anything else (files, lavfi and streams fix their own size).
    ``timeout_s`` bounds each blocking step of a network stream (ignored otherwise)."""

    spec: str
    size: tuple[int, int] | None = None
    rate: float | None = None
    input_format: str | None = None
    realtime: bool | None = None
    timeout_s: float = NETWORK_TIMEOUT_S
    transport: str | None = None  # RTSP's: "tcp" (None) or "udp"
    codec: Codec = "auto"
    copy: bool | None = None  # None: copy H.264/H.265 when ``codec`` and no resize allow
    sound: bool = True  # a copied source's sound rides in its segments

    @property
    def resize(self) -> tuple[int, int] | None:
        """The size frames are scaled to after decoding (None: keep)."""
        return None if self._is_capture_device() else self.size

    @property
    def copy_codecs(self) -> frozenset[str]:
        """FFmpeg's names of the source codecs whose packets are copied, not decoded."""
        if self.copy is False or self.resize is not None:
            return frozenset()
        return COPIED_BY[self.codec]

    def open(self, start_s: float = 0.0) -> VideoInput | PacketInput:
        """Open the source (blocks: call it in a thread); a file from ``start_s``: a
        :class:`~devices.PacketInput` when its video is copied (see :attr:`copy_codecs`),
        else a decoding :class:`~devices.VideoInput`. Raises what
        :func:`devices.open_video` raises (``DeviceNotFound``/``UnsupportedMode`` list
        what is available), and ``ValueError`` when ``copy = true`` or ``codec =
        "h265"`` meet a source whose video cannot be copied."""
        device = self._is_capture_device()
        if not device and (self.rate is not None or self.input_format is not None):
            raise ValueError(
                f"rate and input_format only apply to capture devices; {self.spec!r} "
                "fixes them itself"
            )
        opened = open_video(
            self.spec,
            size=self.size if device else None,
            fps=self.rate,
            input_format=self.input_format,
            realtime=self.realtime,
            # No resize asked: an MJPEG camera's JPEGs are emitted as they are.
            passthrough=self.resize is None,
            timeout_s=self.timeout_s,
            start_s=start_s,
            transport=self.transport,
            copy_codecs=self.copy_codecs,
            audio=self.sound,
        )
        if isinstance(opened, VideoInput) and (self.copy or self.codec == "h265"):
            opened.close()
            wanted = "H.265" if self.codec == "h265" else "H.264 or H.265"
            raise ValueError(
                f"{opened.spec} sends {opened.info.codec} video; "
                f"{'codec = h265' if self.codec == 'h265' else 'copy = true'} keeps {wanted} "
                "as it is and cannot copy it (leave copy unset, or codec = 'auto', to encode)"
            )
        return opened

    async def open_async(self, start_s: float = 0.0) -> VideoInput | PacketInput:
        return await asyncio.to_thread(self.open, start_s)

    def _is_capture_device(self) -> bool:
        return parse_video_spec(self.spec).kind in CAPTURE_KINDS


@dataclass(frozen=True)
class VideoOptions:
    """The emission half of the camera options (see :class:`CameraConnector`)."""

    fps: float = 15.0
    quality: int = 85
    segment_s: float = 2.0
    codec: Codec = "auto"
    video: bool | None = None
    live_audio: str | None = None  # the node whose sound the live view carries
    live_part_s: float = 0.5  # the live view's parts
    image: bool | None = None  # JPEGs: None = always when decoded, else while read


def wanted(ctx: Context, port: str, forced: bool | None) -> bool:
    """``forced`` when set, else whether any node reads ``port``."""
    if forced is not None:
        return forced
    return ctx.more.has_readers(port)
