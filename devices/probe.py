"""What a camera, stream, file or virtual source offers, and what mediaflow does with it.

:func:`probe_source` opens a spec once (the forms of :mod:`devices.video_spec`), reads
its streams' facts, then demuxes packets, never decoding them, for at most ``listen_s``
to measure the keyframe interval, a frame rate the stream does not declare, and the
bitrate. The measurements are pure functions of the packets seen; the open and the
demux loop are the only effects. Plans come from :mod:`devices.codecs`. Results and
errors name the source by :func:`~devices.redact.public_url`, never with its password.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import av
import av.error
from av.container.input import InputContainer

from devices.codecs import audio_plan, copies_video
from devices.errors import DeviceNotFound
from devices.redact import public_url, scrub
from devices.stream_reading import unreachable
from devices.video_spec import NETWORK_TIMEOUT_S, SourceKind, VideoSource, parse_video_spec

#: Keyframes each video stream shows before listening stops: two gaps for a median.
KEYFRAMES_WANTED = 3
RETRY_SLEEP_S = 0.01  # after EAGAIN from a non-blocking device read

StopReason = Literal["keyframes", "time", "end", "error"]
Keyframe = tuple[int, float | None]  # (packet ordinal in its stream, pts in seconds)


@dataclass(frozen=True)
class VideoFacts:
    """A video stream; ``plan`` is ``"copy"`` (packets kept as the source made them) or
    ``"h264"`` (decoded and encoded to H.264). Fewer than two keyframes seen: the
    interval is None and longer than ``keyframe_at_least_s``. Bitrate in bits/s."""

    index: int
    codec: str  # FFmpeg's name: h264, hevc, mjpeg, rawvideo ...
    profile: str | None
    width: int
    height: int
    fps: float | None
    fps_measured: bool  # the stream declares no rate: measured from pts
    keyframe_interval_s: float | None
    keyframe_interval_frames: int | None
    keyframe_at_least_s: float | None
    bitrate: int | None
    plan: str


@dataclass(frozen=True)
class AudioFacts:
    """An audio stream; ``plan`` is ``"copy"`` or ``"aac"`` (encoded to AAC once)."""

    index: int
    codec: str
    profile: str | None
    sample_rate: int
    channels: int
    layout: str
    bitrate: int | None
    plan: str


@dataclass(frozen=True)
class SourceProbe:
    """What :func:`probe_source` found: ``source`` is the spec without its password,
    ``listened_s`` the wall time spent demuxing, ``stopped`` why it stopped
    (``read_error`` says what failed when that is ``"error"``)."""

    source: str
    kind: SourceKind
    live: bool
    format: str
    duration_s: float | None
    listened_s: float
    stopped: StopReason
    read_error: str | None
    video: tuple[VideoFacts, ...]
    audio: tuple[AudioFacts, ...]

    def to_json(self) -> dict[str, Any]:
        """Plain dicts, lists, strings and numbers."""
        data = asdict(self)
        data.update(video=[asdict(v) for v in self.video], audio=[asdict(a) for a in self.audio])
        return data


@dataclass
class _Tally:
    """What the demux loop saw of one stream."""

    packets: int = 0
    size: int = 0
    times: list[float] = field(default_factory=list)
    keyframes: list[Keyframe] = field(default_factory=list)

    def add(self, when: float | None, size: int, keyframe: bool) -> None:
        if keyframe:
            self.keyframes.append((self.packets, when))
        if when is not None:
            self.times.append(when)
        self.packets += 1
        self.size += size


# -- pure: what the packets say ----------------------------------------------------------


def keyframe_interval(
    keyframes: Sequence[Keyframe], times: Sequence[float], fps: float | None
) -> tuple[float | None, int | None, float | None]:
    """``(seconds, frames, at_least_s)``: the median gap between consecutive keyframes.
    Seconds come from pts, frames from seconds and ``fps`` (packets arrive in decode
    order, so with B-frames their count between keyframes is not the GOP's); without a
    timed gap (RTSP's first packet may lack pts) from the packets between them. With
    fewer than two keyframes: ``(None, None, s)``, the gap being longer than ``s``.
    ``times``: the pts of every packet seen."""
    gaps = list(itertools.pairwise(keyframes))
    if not gaps:
        seen = keyframes[0][1] if keyframes else None
        start = seen if seen is not None else min(times, default=None)
        return None, None, None if start is None else max(times) - start
    timed = [b[1] - a[1] for a, b in gaps if a[1] is not None and b[1] is not None]
    counted = statistics.median_low(b[0] - a[0] for a, b in gaps)
    if not timed:
        return (counted / fps if fps else None), counted, None
    seconds = statistics.median(timed)
    return seconds, round(seconds * fps) if fps else counted, None


def measured_rate(times: Sequence[float]) -> float | None:
    """Frames per second from the distinct pts seen (None below two)."""
    distinct = sorted(set(times))
    return (len(distinct) - 1) / (distinct[-1] - distinct[0]) if len(distinct) > 1 else None


def measured_bitrate(size: int, packets: int, times: Sequence[float]) -> int | None:
    """Bits per second of ``packets`` holding ``size`` bytes, ``times`` the pts of those
    that had one: ``len(times) - 1`` gaps span them, ``packets`` gaps all of them."""
    if len(times) < 2 or max(times) <= min(times):
        return None
    return round(size * 8 * (len(times) - 1) / ((max(times) - min(times)) * packets))


def stop_reason(
    *, live: bool, wall_s: float, media_s: float, listen_s: float, keyframes: Sequence[int]
) -> StopReason | None:
    """Stop once every video stream (``keyframes``: how many each showed) showed
    :data:`KEYFRAMES_WANTED`, or ``listen_s`` passed on the clock or, unless live, in
    media time."""
    if keyframes and min(keyframes) >= KEYFRAMES_WANTED:
        return "keyframes"
    if wall_s >= listen_s or (not live and media_s >= listen_s):
        return "time"
    return None


# -- effects: open once, demux a while ---------------------------------------------------


def probe_source(
    spec: str,
    *,
    timeout_s: float = NETWORK_TIMEOUT_S,
    listen_s: float = 5.0,
    transport: str | None = None,
) -> SourceProbe:
    """Open ``spec`` once and say what it offers. Blocks (the open, then up to
    ``listen_s``; a network read may add ``timeout_s``): from async code call it through
    ``asyncio.to_thread``. Cannot be cancelled midway.

    Listening stops after ``listen_s`` on the clock (for files and virtual sources also
    of media time), once each video stream showed :data:`KEYFRAMES_WANTED` keyframes,
    or at the end. ``transport`` (``"tcp"``/``"udp"``) is RTSP's; other kinds ignore it.

    Raises :class:`DeviceNotFound` when ``spec`` cannot be opened (no such file or
    device, a URL refused or unanswered; its subclass
    :class:`~devices.errors.CredentialsRefused` for a refused login), naming
    :func:`~devices.redact.public_url` and FFmpeg's scrubbed reason; ``ValueError`` for
    a malformed spec or argument, or a source with neither audio nor video.
    """
    if not listen_s > 0:
        raise ValueError(f"listen_s must be positive, got {listen_s!r}")
    source = _parse(spec, timeout_s, transport)
    shown = public_url(spec)
    container = _open(source, shown, timeout_s)
    try:
        streams = [s for s in container.streams if s.type in ("video", "audio")]
        if not streams:
            raise ValueError(f"{shown} has neither audio nor video")
        started = time.monotonic()
        tallies, stopped, error = _listen(container, streams, source, listen_s)
        return SourceProbe(
            source=shown,
            kind=source.kind,
            live=source.is_live,
            format=container.format.name,
            duration_s=container.duration / av.time_base if container.duration else None,
            listened_s=round(time.monotonic() - started, 3),
            stopped=stopped,
            read_error=error,
            video=tuple(_video(s, tallies[s.index]) for s in streams if s.type == "video"),
            audio=tuple(_audio(s, tallies[s.index]) for s in streams if s.type == "audio"),
        )
    finally:
        container.close()


def _parse(spec: str, timeout_s: float, transport: str | None) -> VideoSource:
    try:
        return parse_video_spec(spec, timeout_s=timeout_s, transport=transport)
    except ValueError as exc:
        message = scrub(str(exc), spec)
    if "://" not in spec and (os.sep in spec or "." in spec):
        raise DeviceNotFound(public_url(spec), [], reason="no such file")
    raise ValueError(message)  # outside the handler: no chained error quotes a password


def _open(source: VideoSource, shown: str, timeout_s: float) -> InputContainer:
    if source.kind == "file" and not os.path.isfile(source.url):
        raise DeviceNotFound(shown, [], reason="no such file")
    started = time.monotonic()
    try:
        return av.open(
            source.url, format=source.format, options=source.options, timeout=source.timeout
        )
    except (OSError, av.FFmpegError) as exc:
        error = unreachable(source.spec, exc)
        if type(error) is DeviceNotFound and time.monotonic() - started >= timeout_s:  # not a login
            # FFmpeg's interrupt fired; its error ("Invalid data ...") says how it gave up.
            reason = f"no answer within {timeout_s:g} s: {scrub(_words(exc), source.spec)}"
            error = DeviceNotFound(shown, [], reason=reason)
    # Outside the handler: FFmpeg's error quotes the URL, password and all, and a chained
    # cause would print it in any traceback.
    raise error


def _listen(
    container: InputContainer, streams: list[Any], source: VideoSource, listen_s: float
) -> tuple[dict[int, _Tally], StopReason, str | None]:
    tallies = {s.index: _Tally() for s in streams}
    video = [s for s in streams if s.type == "video"]
    # Every packet a keyframe (MJPEG, raw video), whatever the demuxer flags.
    intra = {s.index for s in video if _raw(s) or s.codec_context.codec.intra_only}
    started = time.monotonic()
    span: list[float] = []  # the earliest and latest pts of any stream
    demux = container.demux(streams)
    while (
        stopped := stop_reason(
            live=source.is_live,
            wall_s=time.monotonic() - started,
            media_s=span[1] - span[0] if span else 0.0,
            listen_s=listen_s,
            keyframes=[len(tallies[s.index].keyframes) for s in video],
        )
    ) is None:
        try:
            packet = next(demux, None)
        except av.error.BlockingIOError:  # a device with no frame ready yet
            time.sleep(RETRY_SLEEP_S)
            demux = container.demux(streams)  # the spent generator cannot go on
            continue
        except av.error.EOFError:
            packet = None
        except (OSError, av.FFmpegError) as exc:
            return tallies, "error", scrub(_words(exc), source.spec)
        if packet is None:
            return tallies, "end", None
        if not packet.size:
            continue  # the demuxer's end-of-stream flush packet
        index = packet.stream.index
        when = float(packet.pts * packet.time_base) if packet.pts is not None else None
        tallies[index].add(when, packet.size, packet.is_keyframe or index in intra)
        if when is not None:
            span = [min(span[0], when), max(span[1], when)] if span else [when, when]
    return tallies, stopped, None


def _raw(stream: Any) -> bool:
    """lavfi's packets point at a raw frame in memory: each a keyframe, with no bitrate."""
    return bool(stream.codec_context.name == "wrapped_avframe")


def _video(stream: Any, tally: _Tally) -> VideoFacts:
    codec = stream.codec_context
    declared = stream.average_rate
    measured = None if declared else measured_rate(tally.times)
    # FFmpeg's guess comes last: over RTSP it is often the clock rate (90000).
    rate = declared or measured or stream.guessed_rate
    fps = float(rate) if rate else None
    seconds, frames, at_least = keyframe_interval(tally.keyframes, tally.times, fps)
    return VideoFacts(
        index=stream.index,
        codec=codec.name,
        profile=codec.profile or None,
        width=codec.width,
        height=codec.height,
        fps=_round(fps),
        fps_measured=measured is not None,
        keyframe_interval_s=_round(seconds),
        keyframe_interval_frames=frames,
        keyframe_at_least_s=_round(at_least),
        bitrate=_bitrate(stream, tally),
        plan="copy" if copies_video(codec.name) else "h264",
    )


def _audio(stream: Any, tally: _Tally) -> AudioFacts:
    codec = stream.codec_context
    return AudioFacts(
        index=stream.index,
        codec=codec.name,
        profile=codec.profile or None,
        sample_rate=codec.sample_rate,
        channels=codec.channels,
        layout=codec.layout.name,
        bitrate=_bitrate(stream, tally),
        plan=audio_plan(codec.name),
    )


def _bitrate(stream: Any, tally: _Tally) -> int | None:
    if _raw(stream):
        return None
    return measured_bitrate(tally.size, tally.packets, tally.times) or stream.bit_rate or None


def _words(exc: Exception) -> str:
    """FFmpeg's reason without the URL PyAV appends to it (``strerror``)."""
    return getattr(exc, "strerror", None) or str(exc)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
