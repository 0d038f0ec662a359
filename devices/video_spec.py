"""Turn a video spec string into what ``av.open`` needs. Pure (one ``os.path`` check).

Spec forms:

- ``/dev/videoN``, ``/dev/v4l/by-id/...`` or ``v4l2:/dev/videoN``: a V4L2 camera;
- ``avfoundation:0`` (macOS), ``dshow:video=Name`` (Windows);
- ``lavfi:testsrc2=size=640x480:rate=30``: a virtual source (an FFmpeg filter graph);
- ``file:clip.mp4`` or a bare existing path: a media file;
- ``rtsp://``, ``rtsps://``, ``rtmp://``, ``http://``, ``https://``, ``srt://``,
  ``udp://`` URLs: network streams.

Network streams get what :func:`url_options` and :func:`url_timeout` return, on every
open path (video here, sound in :mod:`devices.audio_input` through the url connector),
so a server that accepts and then never answers costs a timeout, not a hung thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

SourceKind = Literal["v4l2", "avfoundation", "dshow", "lavfi", "file", "url", "webrtc"]

#: Kinds whose frames come at the device's pace and cannot be paused.
LIVE_KINDS: frozenset[str] = frozenset({"v4l2", "avfoundation", "dshow", "url"})
#: Kinds for which the end of the stream means the device went away (cameras never end).
ENDLESS_KINDS: frozenset[str] = frozenset({"v4l2", "avfoundation", "dshow"})

URL_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "srt://", "udp://")
#: Default longest wait, in seconds, for each blocking step of a network stream.
NETWORK_TIMEOUT_S = 10.0
_PREFIXES: tuple[tuple[str, SourceKind], ...] = (
    ("v4l2:", "v4l2"),
    ("avfoundation:", "avfoundation"),
    ("dshow:", "dshow"),
    ("lavfi:", "lavfi"),
    ("file:", "file"),
)


@dataclass(frozen=True)
class VideoSource:
    """A parsed spec: ``av.open(url, format=format, options=options, timeout=timeout)``."""

    spec: str
    kind: SourceKind
    url: str
    format: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    timeout: tuple[float, float] | None = None

    @property
    def is_live(self) -> bool:
        """True for devices and network streams: not paced, drop-oldest when slow."""
        return self.kind in LIVE_KINDS


def parse_video_spec(
    spec: str,
    *,
    size: tuple[int, int] | None = None,
    fps: float | None = None,
    input_format: str | None = None,
    timeout_s: float = NETWORK_TIMEOUT_S,
    transport: str | None = None,
) -> VideoSource:
    """Parse ``spec`` and attach capture options. Never blocks.

    ``size``, ``fps`` and ``input_format`` are requests to a device; a file, a URL or a
    filter graph already fixes them (write ``lavfi:testsrc2=size=320x240:rate=15``), so
    passing them there raises ``ValueError``, as does an empty spec or a non-positive
    size or rate. ``timeout_s`` bounds each blocking step of a network stream (see
    :func:`url_timeout`; other kinds ignore it) and must be positive too;
    ``transport`` is RTSP's (see :func:`url_options`).
    """
    text = spec.strip()
    if not text:
        raise ValueError("empty video spec")
    if size is not None and (size[0] <= 0 or size[1] <= 0):
        raise ValueError(f"size must be positive, got {size}")
    if fps is not None and fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    network_timeout = url_timeout(timeout_s)
    kind, url = _split(text)
    if kind in ("lavfi", "file", "url"):
        asked = [n for n, v in (("size", size), ("fps", fps), ("input_format", input_format)) if v]
        if asked:
            raise ValueError(
                f"{', '.join(asked)} only apply to capture devices; {spec!r} fixes them itself"
            )
        if kind == "lavfi":
            return VideoSource(spec, kind, url, format="lavfi")
        if kind == "file":
            return VideoSource(spec, kind, url)
        return VideoSource(
            spec, kind, url, options=url_options(url, transport), timeout=network_timeout
        )
    options: dict[str, str] = {}
    if size is not None:
        options["video_size"] = f"{size[0]}x{size[1]}"
    if fps is not None:
        options["framerate"] = f"{fps:g}"
    if input_format is not None:
        if kind == "dshow":
            key = "vcodec" if input_format in ("mjpeg", "h264") else "pixel_format"
        else:
            key = "input_format" if kind == "v4l2" else "pixel_format"
        options[key] = input_format
    return VideoSource(spec, kind, url, format=kind, options=options)


def _split(text: str) -> tuple[SourceKind, str]:
    if text.startswith(URL_SCHEMES):
        return "url", text
    for prefix, kind in _PREFIXES:
        if text.startswith(prefix):
            rest = text[len(prefix) :]
            if not rest:
                raise ValueError(f"nothing after {prefix!r} in video spec")
            return kind, rest
    if text.startswith("/dev/"):
        return "v4l2", text
    if os.path.exists(text):
        return "file", text
    raise ValueError(
        f"cannot tell what {text!r} is: not an existing file, and none of v4l2:, /dev/, "
        "avfoundation:, dshow:, lavfi:, file:, or a stream URL"
    )


TRANSPORTS = ("tcp", "udp")


def url_options(url: str, transport: str | None = None) -> dict[str, str]:
    """The FFmpeg options a stream ``url`` is opened with (a new dict). Pure.

    RTSP goes over ``transport``: ``"tcp"`` by default (interleaved in the RTSP
    connection, which survives NAT and lossy Wi-Fi, where UDP drops become smeared
    frames), or ``"udp"``. Raises ``ValueError`` for another transport."""
    if transport is not None and transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
    if url.startswith(("rtsp://", "rtsps://")):
        return {"rtsp_transport": transport or "tcp"}
    return {}


def url_timeout(timeout_s: float = NETWORK_TIMEOUT_S) -> tuple[float, float]:
    """``av.open``'s ``timeout`` for a stream: (open, read), ``timeout_s`` each. Pure.

    PyAV enforces it through FFmpeg's interrupt callback, so it holds for every
    protocol (TCP connect, an HTTP server that never answers, RTSP, RTMP). Each of the
    open's two steps (open the input, probe its streams) and each later read may take
    ``timeout_s``; then FFmpeg's error is raised instead of the thread hanging.
    Raises ``ValueError`` unless ``timeout_s`` is positive.
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    return (timeout_s, timeout_s)
