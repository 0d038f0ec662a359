"""``connector = "url"``: a network camera or sound stream (RTSP, HTTP, SRT ...).

``media`` picks the ports: ``"video"`` (``image`` and ``video``, as the camera
connector emits them), ``"audio"`` (``audio``, as the microphone connector does)
or ``"both"``. A stream that fails or ends is a lost device: ``device_lost``, backoff,
reconnect, ``device_restored``. Both media open with the same FFmpeg options and
``timeout_s`` (:func:`devices.url_options`, :func:`devices.url_timeout`): a server that
accepts and then says nothing fails the open, or a read, instead of hanging a thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import av

from connectors._audio import AudioRequest
from connectors._connector import AUDIO_PORTS, VIDEO_PORTS, MediaConnector
from connectors._options import positive
from connectors._reconnect import Reconnect
from connectors.camera import video_options, video_request
from devices import (
    NETWORK_TIMEOUT_S,
    AudioInput,
    FrameBridge,
    url_options,
    url_timeout,
)
from devices.audio_input import AudioInfo, DecodedAudioSource
from devices.redact import public_url
from devices.stream_reading import unreachable

MEDIA = ("video", "audio", "both")
LIVE_BUFFER_CHUNKS = 50  # ~5 s of 100 ms chunks before the oldest is dropped


def _outputs(media: str) -> dict[str, str]:
    if media not in MEDIA:
        raise ValueError(f"media must be one of {', '.join(MEDIA)}, got {media!r}")
    ports: dict[str, str] = {}
    if media in ("video", "both"):
        ports.update(VIDEO_PORTS)
    if media in ("audio", "both"):
        ports.update(AUDIO_PORTS)
    return ports


@dataclass(frozen=True)
class StreamAudioRequest(AudioRequest):
    """The sound of a network stream, decoded as it arrives (not paced: the server
    sets the pace), chunks dropped oldest-first when the flow falls behind. Opening
    and each read wait at most ``timeout_s`` per step (see :func:`devices.url_timeout`)."""

    timeout_s: float = NETWORK_TIMEOUT_S
    transport: str | None = None

    def open(self, start_s: float = 0.0) -> AudioInput:
        """Open the stream (blocks: call it in a thread; a live stream has no position to
        start from, so ``start_s`` is ignored). Raises ``DeviceNotFound`` when
        the stream cannot be opened now (refused, not found, no answer within
        ``timeout_s``), ``ValueError`` for a non-positive ``timeout_s``."""
        timeout = url_timeout(self.timeout_s)
        try:
            source = DecodedAudioSource(
                self.spec, self.spec, None, rate=self.rate, channels=self.channels,
                chunk_ms=self.chunk_ms, realtime=False,
                options=url_options(self.spec, self.transport),
                timeout=timeout,
            )  # fmt: skip
        except (OSError, av.FFmpegError) as exc:
            raise unreachable(self.spec, exc) from None
        name = public_url(self.spec)
        info = AudioInfo(
            name, "file", name, self.rate, self.channels, self.chunk_ms,
            self.rate * self.chunk_ms // 1000, True, source.source_rate, source.source_channels,
        )  # fmt: skip
        return AudioInput(info, source, FrameBridge(LIVE_BUFFER_CHUNKS, "drop_oldest"))


class UrlConnector(MediaConnector):
    """Emits a network stream (see the module doc).

    Options: ``url`` (required), ``media`` ("video"), the camera's ``fps``,
    ``quality``, ``size`` (a resize), ``segment_s``, ``codec``, ``copy``, ``video``,
    ``image``, ``transport`` (RTSP: ``tcp`` or ``udp``), the
    microphone's ``rate``, ``channels``, ``chunk_ms``, ``timeout_s`` (10.0: the longest
    wait, in seconds, for each step of opening the stream and for each read, for video
    and sound alike; a silent server then counts as unreachable or lost; must be
    positive) and ``reconnect_base_s``/``reconnect_max_s``.
    """

    @classmethod
    def ports(cls, options: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
        """``({}, outputs)`` from ``media``; the stream is not contacted at load time."""
        return {}, _outputs(str(options.get("media", "video")))

    def __init__(
        self,
        url: str,
        media: str = "video",
        fps: float = 15.0,
        quality: int = 85,
        size: str | None = None,
        segment_s: float = 2.0,
        codec: str = "auto",
        video: bool | None = None,
        rate: int = 16000,
        channels: int = 1,
        chunk_ms: int = 100,
        timeout_s: float = NETWORK_TIMEOUT_S,
        reconnect_max_s: float = 10.0,
        reconnect_base_s: float = 0.5,
        copy: bool | None = None,
        image: bool | None = None,
        transport: str | None = None,
    ) -> None:
        """Checks the options (``ValueError``); connects in ``setup``."""
        outputs = _outputs(media)
        timeout_s = positive("timeout_s", timeout_s)
        options = video_options(
            fps=fps, quality=quality, segment_s=segment_s, codec=codec, video=video, image=image
        )
        super().__init__(
            url,
            video=(
                video_request(
                    url,
                    size=size,
                    timeout_s=timeout_s,
                    transport=transport,
                    codec=codec,
                    copy=copy,
                )
                if "video" in outputs
                else None
            ),
            video_options=options,
            audio=(
                StreamAudioRequest(
                    url, rate, channels, chunk_ms, timeout_s=timeout_s, transport=transport
                )
                if "audio" in outputs
                else None
            ),
            reconnect=Reconnect(reconnect_base_s, reconnect_max_s),
        )
