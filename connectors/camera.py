"""``connector = "camera"``: a camera (or any video source) as JPEGs and segments.

Ports: ``image`` (``image/jpeg`` at ``fps``; an MJPEG camera's own JPEG bytes when no
resize is asked) and ``video`` (segments of about ``segment_s``, made only while a
node reads ``video`` unless ``video`` says otherwise). A source that already sends
H.264 or H.265 (an IP camera, a recording, a camera that encodes) is *copied*: its
segments are fragmented MP4 of its own packets and sound, cut at its keyframes, and
its pictures are decoded only for ``image``, as little as ``fps`` needs (see
:mod:`connectors._copy_run`). Anything else (raw, MJPEG) is decoded and encoded by
``codec``: H.264 in fragmented MP4, or VP8/VP9 in WebM.

``device`` is anything :func:`devices.open_video` opens: ``/dev/video0``,
``avfoundation:0``, ``dshow:video=Name``, ``lavfi:testsrc2=size=1280x720:rate=30``,
``file:clip.mp4`` (relative to the flow file) or an ``rtsp://``/``http://`` URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from connectors._connector import VIDEO_PORTS, MediaConnector
from connectors._options import (
    check_codec,
    check_copy,
    check_live_audio,
    check_quality,
    check_transport,
    optional_positive,
    parse_size,
    positive,
)
from connectors._reconnect import Reconnect
from connectors._video_request import VideoOptions, VideoRequest
from devices import NETWORK_TIMEOUT_S


def video_options(
    *,
    fps: float,
    quality: int,
    segment_s: float,
    codec: str,
    video: bool | None,
    live_audio: str | None = None,
    live_part_s: float = 0.5,
    image: bool | None = None,
) -> VideoOptions:
    """Checked emission options (``ValueError`` naming the bad one)."""
    if not 0.1 <= live_part_s <= 10:
        raise ValueError(f"live_part_s must be within 0.1-10 seconds, got {live_part_s!r}")
    return VideoOptions(
        fps=positive("fps", fps),
        quality=check_quality(quality),
        segment_s=positive("segment_s", segment_s),
        codec=check_codec(codec),
        video=video,
        live_audio=check_live_audio(live_audio, codec),
        live_part_s=float(live_part_s),
        image=image,
    )


def video_request(
    device: str,
    *,
    size: str | None = None,
    rate: float | None = None,
    input_format: str | None = None,
    realtime: bool | None = None,
    timeout_s: float = NETWORK_TIMEOUT_S,
    transport: str | None = None,
    codec: str = "auto",
    copy: bool | None = None,
) -> VideoRequest:
    """Checked opening options (``ValueError`` naming the bad one)."""
    request = VideoRequest(
        device,
        parse_size(size),
        optional_positive("rate", rate),
        input_format,
        realtime,
        timeout_s=positive("timeout_s", timeout_s),
        transport=check_transport(transport),
        codec=check_codec(codec),
        copy=copy,
    )
    check_copy(copy, request.codec, request.resize is not None)
    return request


class CameraConnector(MediaConnector):
    """Emits a video source on ``image`` and ``video`` (see the module doc).

    Options: ``device`` (required); ``fps`` (JPEGs per second, 15); ``quality`` (JPEG,
    1-100, 85); ``size`` (``"WxH"``: asked of a capture device, a resize for anything
    else); ``rate`` (capture frames per second) and ``input_format`` (``mjpeg``,
    ``yuyv422`` ...), both for capture devices; ``segment_s`` (2.0; for a copied
    source the target: segments start at its keyframes); ``codec`` (``auto``: keep a
    source's own H.264/H.265, else encode H.264; ``h264``, ``h265`` (copied only),
    ``vp8``, ``vp9``); ``copy`` (unset: copy when ``codec`` allows and no ``size``
    is asked; false: always decode and encode; true: fail unless the source can be
    copied); ``video`` (True/False forces segments on/off; unset: only while a node
    reads ``video``); ``image`` (True/False forces JPEGs on/off; unset: always for a
    decoded source, only while a node reads ``image`` for a copied one);
    ``realtime`` (files and lavfi: false = as fast as possible, losing nothing);
    ``transport`` (RTSP: ``tcp``, the default, or ``udp``) and ``timeout_s`` (10: the
    longest wait of a network stream); ``reconnect_base_s``/``reconnect_max_s``
    (backoff after an unplug, 0.5 s doubling up to 10 s); ``live_audio`` (the id of a
    microphone node in this flow whose sound the live view carries, H.264 only; a
    copied camera's own sound is carried when it has one); ``live_part_s`` (the live
    view's part length, 0.5 s: shorter is less latency for more requests).
    """

    outputs: ClassVar[Mapping[str, str]] = VIDEO_PORTS

    def __init__(
        self,
        device: str,
        fps: float = 15.0,
        quality: int = 85,
        size: str | None = None,
        rate: float | None = None,
        input_format: str | None = None,
        segment_s: float = 2.0,
        codec: str = "auto",
        video: bool | None = None,
        realtime: bool | None = None,
        reconnect_max_s: float = 10.0,
        reconnect_base_s: float = 0.5,
        live_audio: str | None = None,
        live_part_s: float = 0.5,
        copy: bool | None = None,
        image: bool | None = None,
        transport: str | None = None,
        timeout_s: float = NETWORK_TIMEOUT_S,
    ) -> None:
        """Checks the options (``ValueError``); opens nothing (``setup`` does)."""
        request = video_request(
            device, size=size, rate=rate, input_format=input_format, realtime=realtime,
            timeout_s=timeout_s, transport=transport, codec=codec, copy=copy,
        )  # fmt: skip
        options = video_options(
            fps=fps,
            quality=quality,
            segment_s=segment_s,
            codec=codec,
            video=video,
            live_audio=live_audio,
            live_part_s=live_part_s,
            image=image,
        )
        super().__init__(
            device,
            video=request,
            video_options=options,
            reconnect=Reconnect(reconnect_base_s, reconnect_max_s),
        )
