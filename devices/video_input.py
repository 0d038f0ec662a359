"""Open any video input PyAV reads, decode it in a thread, hand frames to asyncio.

One path for every kind (see :mod:`devices.video_spec`): V4L2, AVFoundation and
DirectShow cameras, network streams, files and lavfi virtual sources. Decoding runs in
a producer thread that feeds a bounded :class:`~devices.bridge.FrameBridge`:

- live sources (cameras, network streams) are never paced and drop the oldest frame
  when the consumer is slow (counted in ``statistics().bridge.dropped``);
- files and lavfi block instead (lossless) and are paced to real time by pts unless
  ``realtime=False``.

Outcomes: a :class:`CapturedFrame`; :class:`~devices.errors.EndOfStream` when a file,
lavfi graph or network stream ends; :class:`~devices.errors.DeviceLost` when a camera or
network stream fails or a camera stops delivering, so the caller can back off and
reopen; any other error of a file is raised as it is.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import av
import av.error
from av.container.input import InputContainer
from av.video.stream import VideoStream

from devices.bridge import BridgeStatistics, FrameBridge
from devices.camera_modes import check_mode
from devices.cameras import CameraInfo, list_cameras
from devices.errors import DeviceLost, DeviceNotFound
from devices.pacing import Pacer
from devices.packet_input import PacketInput
from devices.redact import public_url
from devices.stream_reading import demux_or_lost, unreachable
from devices.threaded import ThreadedInput
from devices.video_info import DemuxSource, VideoInfo, video_info
from devices.video_spec import (
    LIVE_KINDS,
    NETWORK_TIMEOUT_S,
    SourceKind,
    VideoSource,
    parse_video_spec,
)

PTS_TOLERANCE_S = 1e-6

#: (pts, decoded frame, passthrough JPEG, width, height) on the producer thread.
Item = tuple[float, av.VideoFrame | None, bytes | None, int, int]


@dataclass(frozen=True, slots=True)
class CapturedFrame:
    """One frame: decoded (``frame``) or, in passthrough, the undecoded JPEG (``packet``).

    ``pts`` is seconds since the first frame of this input; ``index`` counts frames
    produced (a gap means the bridge dropped frames for a slow consumer).
    """

    frame: av.VideoFrame | None
    packet: bytes | None
    pts: float
    index: int
    width: int
    height: int
    captured_at: float  # wall clock: when a live source's producer got it; else anchor + pts


@dataclass(frozen=True)
class VideoStatistics:
    """Counters of the producer thread and its bridge."""

    produced: int
    decode_errors: int
    bridge: BridgeStatistics


class DecodedVideo(Protocol):
    """What a decoding video run reads: a :class:`VideoInput`, or a WebRTC publisher's
    track (:class:`~devices.track_input.TrackVideoInput`)."""

    @property
    def info(self) -> VideoInfo: ...

    def statistics(self) -> VideoStatistics: ...

    def __aiter__(self) -> AsyncIterator[CapturedFrame]: ...

    async def aclose(self) -> None: ...


def open_video(
    spec: str,
    *,
    size: tuple[int, int] | None = None,
    fps: float | None = None,
    input_format: str | None = None,
    realtime: bool | None = None,
    passthrough: bool = False,
    max_buffered: int | None = None,
    cameras: Sequence[CameraInfo] | None = None,
    timeout_s: float = NETWORK_TIMEOUT_S,
    start_s: float = 0.0,
    transport: str | None = None,
    copy_codecs: frozenset[str] = frozenset(),
    audio: bool = True,
) -> VideoInput | PacketInput:
    """Open ``spec`` and return a :class:`VideoInput` (decoding starts on first read), or a
    :class:`~devices.packet_input.PacketInput` when its video is one of ``copy_codecs``
    (FFmpeg's names, e.g. ``{"h264", "hevc"}``): packets as encoded, the first sound
    stream's too when ``audio``.

    Blocks while the input opens (a device negotiates, a server answers): from async
    code call it through ``asyncio.to_thread``. A network stream waits at most
    ``timeout_s`` for each step of the open and each later read (see
    :func:`~devices.video_spec.url_timeout`); ``transport`` (``"tcp"``, ``"udp"``)
    picks RTSP's; other kinds ignore both.
    ``realtime`` (files and lavfi; default True) paces frames by pts; live sources
    ignore it. ``passthrough`` yields undecoded JPEG packets for MJPEG streams.
    ``cameras`` replaces the V4L2 enumeration used to check the request.
    ``start_s`` (files and lavfi) starts there: the first frame yielded is the first
    whose pts (seconds since the first frame) is at or after it (for packets: the
    keyframe at or before it).

    Messages and the input's ``spec`` name a URL without its password
    (:func:`~devices.redact.public_url`). Raises ``ValueError`` for a malformed spec or
    a non-positive ``timeout_s``; :class:`DeviceNotFound` (listing the cameras) for an
    unknown device, a missing file, an unreachable stream URL or one that does not
    answer within ``timeout_s``; :class:`CredentialsRefused` when a stream refuses the
    URL's user and password (or asks for some); :class:`UnsupportedMode` (listing what
    the camera offers) for a size, rate or format it does not offer; FFmpeg's errors
    (``av.FFmpegError``, an ``OSError`` for system errors) when opening fails
    otherwise, e.g. a busy camera or an AVFoundation mode the device refuses.
    """
    source = parse_video_spec(
        spec, size=size, fps=fps, input_format=input_format, timeout_s=timeout_s,
        transport=transport,
    )  # fmt: skip
    container = _open_container(source, cameras, size=size, fps=fps, input_format=input_format)
    name = public_url(spec)
    codec = container.streams.video[0].codec_context.name
    is_realtime = True if realtime is None else realtime
    read_timeout_s = source.timeout[1] if source.timeout is not None else None
    if codec in copy_codecs:
        info = video_info(name, container, source.kind, passthrough=False)
        return PacketInput(
            name, container, kind=source.kind, info=info, realtime=is_realtime, audio=audio,
            start_s=start_s, url=spec, read_timeout_s=read_timeout_s,
        )  # fmt: skip
    return VideoInput(
        name,
        container,
        kind=source.kind,
        realtime=is_realtime,
        passthrough=passthrough,
        max_buffered=max_buffered,
        start_s=start_s,
        url=spec,
        read_timeout_s=read_timeout_s,
    )


def _open_container(
    source: VideoSource,
    cameras: Sequence[CameraInfo] | None,
    *,
    size: tuple[int, int] | None,
    fps: float | None,
    input_format: str | None,
) -> InputContainer:
    """``av.open`` of a parsed spec, with the device layer's errors (see :func:`open_video`)."""
    spec = source.spec
    listed: Sequence[CameraInfo] = ()
    if source.kind == "v4l2":
        listed = cameras if cameras is not None else list_cameras()
        _check_v4l2_request(source, listed, size=size, fps=fps, input_format=input_format)
    elif source.kind == "file" and not os.path.isfile(source.url):
        raise DeviceNotFound(spec, [], reason="no such file")
    try:
        container = av.open(
            source.url, format=source.format, options=source.options, timeout=source.timeout
        )
    except FileNotFoundError as exc:
        raise DeviceNotFound(spec, [_camera_label(c) for c in listed], reason=str(exc)) from exc
    except (OSError, av.FFmpegError) as exc:
        if source.kind != "url":
            raise
        raise unreachable(spec, exc) from None
    if not container.streams.video:
        container.close()
        raise DeviceNotFound(public_url(spec), [], reason="it has no video stream")
    return container


def _camera_label(camera: CameraInfo) -> str:
    return f"{camera.spec} ({camera.name})"


def _check_v4l2_request(
    source: VideoSource,
    cameras: Sequence[CameraInfo],
    *,
    size: tuple[int, int] | None,
    fps: float | None,
    input_format: str | None,
) -> None:
    real = os.path.realpath(source.url)
    for camera in cameras:
        if source.url == camera.device or real == camera.device or source.url in camera.by_id:
            check_mode(source.spec, camera.formats, size=size, fps=fps, input_format=input_format)
            return
    if not os.path.exists(source.url):
        raise DeviceNotFound(source.spec, [_camera_label(c) for c in cameras])
    # The node exists but was not enumerated (no sysfs, a secondary node): FFmpeg decides.


class VideoInput(ThreadedInput[CapturedFrame]):
    """A video source decoded by a producer thread; consume with ``async for`` or ``read``.

    One consumer task. Use ``async with`` or call ``aclose`` so the thread stops and the
    device is released (see :class:`~devices.threaded.ThreadedInput`).
    """

    def __init__(
        self,
        spec: str,
        container: DemuxSource,
        *,
        kind: SourceKind,
        realtime: bool,
        passthrough: bool = False,
        max_buffered: int | None = None,
        start_s: float = 0.0,
        url: str | None = None,
        read_timeout_s: float | None = None,
    ) -> None:
        """Wrap an open container (``open_video`` does this; tests inject one). Never blocks.
        ``start_s``: skip the frames before it (see :func:`open_video`); ``spec`` names
        the source in messages (no password), ``url`` is what scrubs them."""
        self._container = container
        self._start_s = start_s
        self._url = url or spec
        self._read_timeout_s = read_timeout_s
        self._stream = container.streams.video[0]
        self._kind: SourceKind = kind
        self._live = kind in LIVE_KINDS
        self._realtime = realtime and not self._live
        self._passthrough = passthrough and self._stream.codec_context.name == "mjpeg"
        self.info = video_info(spec, container, kind, passthrough=self._passthrough)
        maxsize = max_buffered if max_buffered is not None else (4 if self._live else 8)
        bridge: FrameBridge[CapturedFrame] = FrameBridge(
            maxsize, "drop_oldest" if self._live else "block"
        )
        super().__init__(spec, bridge)
        self._produced = 0
        self._decode_errors = 0

    def statistics(self) -> VideoStatistics:
        """Frames produced, packets that failed to decode, bridge state. Never blocks."""
        return VideoStatistics(self._produced, self._decode_errors, self._bridge.statistics())

    def _release(self) -> None:
        self._container.close()

    # -- producer thread ------------------------------------------------------------------

    def _produce(self, bridge: FrameBridge[CapturedFrame]) -> None:
        pacer = Pacer(bridge.wait_closed) if self._realtime else None
        anchor: float | None = None  # a file's or lavfi's wall clock at pts 0
        try:
            for pts, frame, packet, width, height in self._positioned():
                if pacer is not None:
                    pacer.wait_until(pts)
                # A live frame was captured when it came; a file's or a graph's is placed
                # by its pts, paced or not (as its sound's chunks are), so a replay as fast
                # as possible keeps the spacing of its frames on the wall clock.
                if anchor is None and not self._live:
                    anchor = time.time() - pts
                at = time.time() if anchor is None else anchor + pts
                bridge.put(CapturedFrame(frame, packet, pts, self._produced, width, height, at))
                self._produced += 1
        finally:
            self._container.close()

    def _positioned(self) -> Iterator[Item]:
        """Items with pts in seconds since the first frame, from ``start_s`` on.

        To start later, the first frame still fixes pts 0, then a seek jumps to a
        keyframe at or before ``start_s`` (a wrapped test container without ``seek``
        decodes its way there) and the frames before it are dropped.
        """
        decoded = self._items()
        first = next(decoded, None)
        if first is None:
            return
        origin = first[0]
        items: Iterator[Item]
        if self._start_s > 0 and isinstance(self._container, InputContainer):
            decoded.close()
            target = origin + self._start_s
            self._container.seek(int(target * av.time_base), backward=True)
            items = self._items()
        else:
            items = itertools.chain([first], decoded)
        for when, frame, packet, width, height in items:
            pts = when - origin
            # Meta pts are rounded to the microsecond: a frame there is at start_s.
            if pts >= self._start_s - PTS_TOLERANCE_S:
                yield pts, frame, packet, width, height

    def _items(self) -> Generator[Item]:
        fallback_rate = self.info.fps or 30.0
        for packet in self._packets():
            if self._passthrough:
                if packet.size == 0:
                    continue  # the demuxer's end-of-stream flush packet
                when = packet.pts * packet.time_base if packet.pts is not None else None
                yield (
                    float(when) if when is not None else self._produced / fallback_rate,
                    None,
                    bytes(packet),
                    self.info.width,
                    self.info.height,
                )
                continue
            for frame in self._decode(packet):
                when_f = frame.time if frame.time is not None else self._produced / fallback_rate
                yield when_f, frame, None, frame.width, frame.height

    def _packets(self) -> Iterator[av.Packet[VideoStream]]:
        """Demuxed packets; a live source's failure becomes ``DeviceLost``."""
        yield from demux_or_lost(
            self._container, [self._stream], self._bridge, live=self._live, kind=self._kind,
            spec=self.spec, url=self._url, read_timeout_s=self._read_timeout_s,
        )  # fmt: skip

    def _decode(self, packet: av.Packet[VideoStream]) -> list[av.VideoFrame]:
        try:
            frames = packet.decode()
        except av.error.InvalidDataError:
            # One corrupt packet (a torn MJPEG frame): skip it, count it, carry on.
            self._decode_errors += 1
            return []
        except Exception as exc:
            if self._live:
                raise DeviceLost(self.spec, exc) from exc
            raise
        return [f for f in frames if isinstance(f, av.VideoFrame)]
