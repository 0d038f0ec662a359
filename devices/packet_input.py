"""Read what a source already encoded: its H.264/H.265 and sound packets, never decoded.

An IP camera (or a file, or a camera that encodes H.264 itself) has done the costly
work; :class:`PacketInput` reads its packets as they are, video and sound from one
demux of one connection, so nothing is decoded unless a consumer asks for a picture.
Handling such a packet costs microseconds, less than handing it to the event loop,
so the consumer's work runs on the producer thread itself: a :class:`PacketStage`
(:meth:`PacketInput.attach`) takes each packet there, and the event loop only waits
for the input to end, as with :class:`~devices.video_input.VideoInput`'s outcomes
(:class:`~devices.errors.EndOfStream`, :class:`~devices.errors.DeviceLost`). Files and
lavfi are paced to real time by decode time unless ``realtime=False``; live sources
are never paced (the stage decides what to leave out when it falls behind).

Each packet carries its times in seconds since the input's first packet, on one
clock for video and sound (RTSP maps both to the sender's clock), and
``captured_at``: the wall-clock time of its presentation, placed by its own
timestamps (:class:`CaptureClock`), not by when the network delivered it; a file's
or lavfi's from its first packet's arrival on, paced or not.
"""

from __future__ import annotations

import io
import time
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, Protocol, TypeAlias

import av
from av.container.input import InputContainer
from av.stream import Stream

from devices.bridge import BridgeStatistics, FrameBridge
from devices.capture_clock import BurstHold, CaptureClock
from devices.codecs import audio_plan
from devices.pacing import Pacer
from devices.stream_reading import demux_or_lost
from devices.threaded import ThreadedInput
from devices.video_info import VideoInfo
from devices.video_spec import LIVE_KINDS, SourceKind

Media = Literal["video", "audio"]
#: A demuxed packet with its pts and dts filled in, and its time base.
Dated: TypeAlias = "tuple[av.Packet[Any], int, int, Fraction]"
EARLY_SOUND = 256  # sound packets kept while waiting for the first keyframe (~5 s of AAC)


@dataclass(frozen=True, slots=True)
class CapturedPacket:
    """One demuxed packet, as the source encoded it.

    ``pts``/``dts`` are in the stream's ``time_base`` as the source stamped them (for a
    muxer copying the packet); ``pts_s``/``dts_s`` are seconds since the input's first
    packet (for decisions), ``duration_s`` is 0 when the source does not say.
    """

    media: Media
    data: bytes
    pts: int
    dts: int
    time_base: Fraction
    pts_s: float
    dts_s: float
    duration_s: float
    keyframe: bool
    captured_at: float


@dataclass(frozen=True)
class StreamTemplates:
    """The source's streams as a muxer needs them, valid after the input is closed.

    ``video``/``audio`` are streams of an output container that is never written:
    ``add_stream_from_template`` copies their codec parameters (extradata included)
    into each segment. ``audio`` is there only for sound an MP4 carries as it is
    (:func:`devices.codecs.audio_plan`); other sound is described by the plain fields,
    which are all a decoder needs.
    """

    video: Stream
    audio: Stream | None
    video_codec: str
    width: int
    height: int
    fps: float | None
    video_extradata: bytes
    audio_codec: str | None = None
    audio_rate: int = 0
    audio_channels: int = 0
    audio_extradata: bytes = b""


class PacketStage(Protocol):
    """Work done on the producer thread itself, packet by packet (see
    :meth:`PacketInput.attach`): copying a camera costs microseconds a packet, less
    than handing each packet to the event loop and on to another thread."""

    def take(self, packet: CapturedPacket) -> None:
        """One packet, in order, with its capture time. May block briefly; may raise
        (the input then ends with that error)."""

    def finish(self) -> None:
        """The input ended (or is being closed): hand on what is still held."""


@dataclass(frozen=True)
class PacketStatistics:
    """Packets the stage took, and the bridge's state (it carries only the outcome)."""

    produced: int
    bridge: BridgeStatistics


def stream_templates(container: InputContainer, audio: bool) -> StreamTemplates:
    """Snapshot the codec parameters of ``container``'s first video (and first sound,
    when ``audio``) stream. Never blocks for long (no I/O)."""
    holder = av.open(io.BytesIO(), "w", format="mp4")
    source = container.streams.video[0]
    video = holder.add_stream_from_template(source)
    codec = source.codec_context
    rate = source.average_rate or source.guessed_rate
    sound = container.streams.audio[0] if audio and container.streams.audio else None
    copied = sound is not None and audio_plan(sound.codec_context.name) == "copy"
    return StreamTemplates(
        video=video,
        audio=holder.add_stream_from_template(sound) if copied and sound is not None else None,
        video_codec=codec.name,
        width=codec.width,
        height=codec.height,
        fps=float(rate) if rate else None,
        video_extradata=bytes(codec.extradata or b""),
        audio_codec=sound.codec_context.name if sound is not None else None,
        audio_rate=int(sound.codec_context.sample_rate) if sound is not None else 0,
        audio_channels=int(sound.codec_context.channels) if sound is not None else 0,
        audio_extradata=bytes(sound.codec_context.extradata or b"") if sound is not None else b"",
    )


class _Timing:
    """One stream's timestamps with the gaps a source leaves filled in. Pure.

    Over RTSP the first packet may come without a timestamp (before the sender's first
    report); it is held and dated back from the next one by its duration. A later
    packet without one continues its predecessor.
    """

    def __init__(self) -> None:
        self.held: list[av.Packet[Any]] = []
        self._next: int | None = None  # the dts a packet without one gets

    def take(self, packet: av.Packet[Any]) -> list[tuple[av.Packet[Any], int, int]]:
        """``(packet, pts, dts)`` of what can be dated now, in order."""
        dts = packet.dts if packet.dts is not None else packet.pts
        if dts is None:
            if self._next is None:
                self.held.append(packet)
                return []
            dts = self._next
        held, self.held = self.held, []
        dated: list[tuple[av.Packet[Any], int, int]] = []
        back = dts
        for early in reversed(held):
            back -= early.duration or 0
            dated.append((early, back, back))
        dated.reverse()
        pts = packet.pts if packet.pts is not None else dts
        dated.append((packet, pts, dts))
        self._next = dts + (packet.duration or 0)
        return dated


class PacketInput(ThreadedInput[CapturedPacket]):
    """A source's encoded packets from a producer thread; consume with ``async for``.

    One consumer task; ``async with`` or :meth:`aclose` stops the thread and releases
    the source. ``info`` is the same :class:`~devices.video_input.VideoInfo` a decoding
    input has; ``templates`` describe the streams for a muxer or a decoder.
    """

    def __init__(
        self,
        spec: str,
        container: InputContainer,
        *,
        kind: SourceKind,
        info: VideoInfo,
        realtime: bool,
        audio: bool = True,
        start_s: float = 0.0,
        url: str | None = None,
        read_timeout_s: float | None = None,
    ) -> None:
        """Wrap an open container (:func:`devices.open_video` does this). Never blocks.
        ``spec`` names the source in messages (no password); ``url`` is what scrubs
        them. ``start_s`` (files): begin at the keyframe at or before it."""
        self.info = info
        self.templates = stream_templates(container, audio)
        self._container = container
        self._kind: SourceKind = kind
        self._live = kind in LIVE_KINDS
        self._realtime = realtime and not self._live
        self._start_s = start_s
        self._url = url or spec
        self._read_timeout_s = read_timeout_s
        streams: list[Stream] = [container.streams.video[0]]
        if self.templates.audio_codec is not None:
            streams.append(container.streams.audio[0])
        self._streams = streams
        # Only the input's outcome crosses it: the packets go to the stage.
        super().__init__(spec, FrameBridge(1, "fail"))
        self._produced = 0
        self._stage: PacketStage | None = None

    def attach(self, stage: PacketStage) -> None:
        """Have ``stage`` take every packet on the producer thread; reading then waits
        for the input to end (:class:`~devices.errors.EndOfStream`,
        :class:`~devices.errors.DeviceLost`, or the stage's error). Call before the
        first read. Raises ``RuntimeError`` once the input has started."""
        if self._thread is not None:
            raise RuntimeError(f"input {self.spec!r} already started")
        self._stage = stage

    def start(self) -> None:
        """Start the producer thread. Raises ``RuntimeError`` without a stage, or after
        :meth:`aclose`."""
        if self._stage is None:
            raise RuntimeError(f"input {self.spec!r}: attach a stage before reading it")
        super().start()

    @property
    def has_audio(self) -> bool:
        return self.templates.audio_codec is not None

    def statistics(self) -> PacketStatistics:
        """Counters; never blocks."""
        return PacketStatistics(self._produced, self._bridge.statistics())

    def _release(self) -> None:
        self._container.close()

    # -- producer thread ------------------------------------------------------------------

    def _produce(self, bridge: FrameBridge[CapturedPacket]) -> None:
        stage = self._stage
        assert stage is not None  # start() checked
        pacer = Pacer(bridge.wait_closed) if self._realtime else None
        clock = CaptureClock()
        # What a live source sent while it was being opened comes out of FFmpeg's buffer
        # at once: held until reading first waits, when the clock knows how old it is.
        hold = BurstHold[CapturedPacket](enabled=self._live)
        packets = self._timed()
        try:
            while not bridge.closed:
                asked = time.monotonic()
                packet = next(packets, None)
                if packet is None:
                    break
                if pacer is not None:
                    pacer.wait_until(packet.dts_s)
                # Clocked in decode order (rising even with B-frames). A file's or a
                # graph's packets are placed by their own times from the first on, paced
                # or not: read as fast as it goes, a replay keeps its spacing on the clock.
                if self._live or self._produced == 0:
                    clock.observe(packet.dts_s, time.time())
                for ready in hold.take(packet, time.monotonic() - asked):
                    self._deliver(stage, ready, clock)
            for ready in hold.flush():
                self._deliver(stage, ready, clock)
        finally:
            try:
                stage.finish()
            finally:
                self._container.close()

    def _deliver(self, stage: PacketStage, packet: CapturedPacket, clock: CaptureClock) -> None:
        """Stamp ``packet`` with its capture time and hand it to ``stage``."""
        decoded_at = clock.time_of(packet.dts_s, packet.media)
        stage.take(_with_capture_time(packet, decoded_at + packet.pts_s - packet.dts_s))
        self._produced += 1

    def _timed(self) -> Iterator[CapturedPacket]:
        """Every packet from the first video keyframe on (nothing decodes before it: a
        live stream joined mid-group), timed in seconds from that keyframe's picture.

        Sound that arrived before the keyframe but plays after it is kept. To start
        later (a resumed run), a seek then goes back to the keyframe at or before
        ``start_s`` and the packets go on from there, on the same clock."""
        origin: float | None = None
        dated = self._dated()
        for packet in self._from_keyframe(dated):
            if origin is None:
                origin = float(packet[1] * packet[3])
                if self._start_s > 0:
                    dated.close()
                    target = origin + self._start_s
                    self._container.seek(int(target * av.time_base), backward=True)
                    break
            yield _captured(*packet, origin)
        else:
            return
        for packet in self._from_keyframe(self._dated()):
            yield _captured(*packet, origin)

    @staticmethod
    def _from_keyframe(dated: Iterator[Dated]) -> Iterator[Dated]:
        early: deque[Dated] = deque(maxlen=EARLY_SOUND)
        for packet in dated:
            av_packet, pts, _, base = packet
            if av_packet.stream.type == "video" and av_packet.is_keyframe:
                yield packet
                start = pts * base
                yield from (sound for sound in early if sound[1] * sound[3] >= start)
                break
            if av_packet.stream.type == "audio":
                early.append(packet)
        yield from dated

    def _dated(self) -> Generator[Dated]:
        timings = {stream.index: _Timing() for stream in self._streams}
        for packet in demux_or_lost(
            self._container, self._streams, self._bridge, live=self._live, kind=self._kind,
            spec=self.spec, url=self._url, read_timeout_s=self._read_timeout_s,
        ):  # fmt: skip
            if packet.size == 0:
                continue  # a demuxer's end-of-stream flush packet
            for each, pts, dts in timings[packet.stream.index].take(packet):
                base = each.time_base
                assert base is not None  # a demuxed packet has its stream's time base
                yield each, pts, dts, base

    def __repr__(self) -> str:
        return f"PacketInput({self.spec!r}, {self.info.codec})"


def _captured(
    packet: av.Packet[Any], pts: int, dts: int, base: Fraction, origin: float
) -> CapturedPacket:
    kind: Media = "video" if packet.stream.type == "video" else "audio"
    return CapturedPacket(
        media=kind,
        data=bytes(packet),
        pts=pts,
        dts=dts,
        time_base=base,
        pts_s=float(pts * base) - origin,
        dts_s=float(dts * base) - origin,
        duration_s=float((packet.duration or 0) * base),
        keyframe=bool(packet.is_keyframe) if kind == "video" else True,
        captured_at=0.0,
    )


def _with_capture_time(packet: CapturedPacket, captured_at: float) -> CapturedPacket:
    return CapturedPacket(
        packet.media, packet.data, packet.pts, packet.dts, packet.time_base, packet.pts_s,
        packet.dts_s, packet.duration_s, packet.keyframe, captured_at,
    )  # fmt: skip
