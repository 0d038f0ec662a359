"""``connector = "webrtc"``: a browser, a phone or OBS publishing over WHIP, as a camera
and a microphone.

``POST /whip/{flow}/{node}`` (see :mod:`mediaflow.server.whip`) hands the publisher's
SDP offer to this node, which answers it with an aiortc peer connection
(:mod:`connectors._whip_peer`). What the publisher sends is decoded by aiortc and
enters the camera's and the microphone's paths through device-level inputs
(:mod:`devices.track_input`): ``image`` (JPEGs at ``fps``), ``video`` (H.264 segments
of ``segment_s`` in fragmented MP4, and the live view, which carries the publisher's
sound) and ``audio`` (WAV chunks of ``chunk_ms`` at ``rate`` / ``channels``), with the
same meta, lanes and skips as a camera and a microphone.

The node runs while nobody publishes: its runs wait for a publisher. A publisher that
leaves (hangs up, is killed, loses its connection) is a device lost: ``device_lost``;
the next one is the device restored: ``device_restored``. ``publishers`` (1) is how
many may be connected at once; past it an offer is answered 503 with
``Retry-After``. With more than one, the others stand by (their frames dropped at a
bounded buffer) and the oldest takes over when the one on the ports leaves.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from connectors._audio import AudioRun
from connectors._options import parse_size
from connectors._reconnect import Reconnect
from connectors._timeline import Resume, read_resume
from connectors._together import run_together
from connectors._video import VideoRun
from connectors._video_request import VideoOptions, VideoRequest
from connectors._whip_peer import Kind, PublisherSlot, TrackOptions
from connectors.camera import video_options
from devices import AudioInput, DeviceNotFound
from devices.video_input import DecodedVideo
from mediaflow import Context, Node
from mediaflow.ingest import IngestAnswer

PORTS: Mapping[str, str] = {"image": "image", "video": "video", "audio": "audio"}
# After a publisher left: look for the next one this often (each look waits up to
# REOPEN_WAIT_S for one to arrive, so a new publisher is taken within milliseconds).
RECONNECT = Reconnect(base_s=0.1, max_s=0.5)
REOPEN_WAIT_S = 1.0


@dataclass(frozen=True)
class PublisherRequest(VideoRequest):
    """A publisher's video: nothing to open (it comes to the node); ``size`` resizes."""

    @property
    def resize(self) -> tuple[int, int] | None:
        return self.size


class WebRTCConnector(Node):
    """Emits a WHIP publisher on ``image``, ``video`` and ``audio`` (see the module doc).

    Options: ``fps`` (JPEGs per second, 15), ``quality`` (JPEG, 85), ``size``
    (``"WxH"``: a resize of what is received), ``segment_s`` (2.0), ``codec``
    (``h264``, the default, ``vp8``, ``vp9``: segments are encoded from the decoded
    frames), ``video``/``image`` (force those ports on or off, as a camera's),
    ``live_part_s`` (0.5), ``rate`` (16000), ``channels`` (1), ``chunk_ms`` (100),
    ``publishers`` (1: how many may be connected at once), ``idle_s`` (3.0: a
    publisher sending nothing this long is lost), ``connect_s`` (10.0: the longest a
    publisher may take to connect and send its first frame).
    """

    outputs: ClassVar[Mapping[str, str]] = PORTS

    def __init__(
        self,
        fps: float = 15.0,
        quality: int = 85,
        size: str | None = None,
        segment_s: float = 2.0,
        codec: str = "h264",
        video: bool | None = None,
        image: bool | None = None,
        live_part_s: float = 0.5,
        rate: int = 16000,
        channels: int = 1,
        chunk_ms: int = 100,
        publishers: int = 1,
        idle_s: float = 3.0,
        connect_s: float = 10.0,
    ) -> None:
        """Checks the options (``ValueError`` naming the bad one); opens nothing."""
        if codec not in ("h264", "vp8", "vp9"):
            raise ValueError(
                f"codec must be h264, vp8 or vp9 (a publisher is decoded), got {codec!r}"
            )
        if int(publishers) < 1:
            raise ValueError(f"publishers must be at least 1, got {publishers!r}")
        if idle_s <= 0 or connect_s <= 0:
            raise ValueError("idle_s and connect_s must be positive")
        if rate <= 0 or chunk_ms <= 0 or (rate * chunk_ms) % 1000 or not 1 <= channels <= 8:
            raise ValueError(f"{chunk_ms} ms at {rate} Hz, {channels} channels, is not a chunk")
        self.options: VideoOptions = video_options(
            fps=fps, quality=quality, segment_s=segment_s, codec=codec, video=video,
            live_part_s=live_part_s, image=image,
        )  # fmt: skip
        self.size = parse_size(size)
        self.tracks = TrackOptions(rate, channels, chunk_ms, float(idle_s), float(connect_s))
        self.cap = int(publishers)
        self.device = "webrtc"
        self.slot = PublisherSlot(self.device, self.cap, self.tracks)
        self.video_run: VideoRun | None = None
        self.audio_run: AudioRun | None = None

    async def setup(self, ctx: Context) -> None:
        """Names the node's publishers after it (``webrtc:{flow}/{node}``); opens nothing."""
        self.device = f"webrtc:{ctx.flow}/{ctx.node}"
        self.slot.name = self.device

    async def whip_offer(self, sdp: str) -> IngestAnswer:
        """Answer a publisher (see :class:`mediaflow.ingest.WhipIngest`)."""
        answer, session = await self.slot.accept(sdp)
        return IngestAnswer(answer, session)

    async def whip_end(self, session: str) -> bool:
        """Hang up a publisher (see :class:`mediaflow.ingest.WhipIngest`)."""
        return await self.slot.end(session)

    async def run(self, ctx: Context) -> None:
        """Emit each publisher in turn until the flow stops."""
        resume = read_resume(ctx, list(PORTS))
        await run_together(self._video_part(ctx, resume), self._audio_part(ctx, resume))

    def _reopen(self, kind: Kind, ctx: Context) -> Any:
        async def reopen() -> Any:
            opened = await self.slot.take(kind, ctx.stopping, REOPEN_WAIT_S)
            if opened is None:
                # The flow is stopping: a reconnect attempt that found nothing.
                raise _no_publisher(self.device)
            return opened

        return reopen

    def _video_part(self, ctx: Context, resume: Resume | None) -> Coroutine[Any, Any, None]:
        async def part() -> None:
            first: DecodedVideo | None = await self.slot.take("video", ctx.stopping, None)
            if first is None:
                return
            request = PublisherRequest(self.device, self.size)
            options = self.options
            if options.codec in ("h264", "auto") and self.slot.sends_sound(first):
                # The publisher's sound, live; a feed waits for the sound it is told of.
                options = replace(options, live_audio=ctx.node)
            self.video_run = VideoRun(ctx, request, options, resume, device=self.device)
            await self.video_run.run(first, policy=RECONNECT, reopen=self._reopen("video", ctx))

        return part()

    def _audio_part(self, ctx: Context, resume: Resume | None) -> Coroutine[Any, Any, None]:
        async def part() -> None:
            first: AudioInput | None = await self.slot.take("audio", ctx.stopping, None)
            if first is None:
                return
            self.audio_run = AudioRun(ctx, self.device, resume)
            await self.audio_run.run(first, policy=RECONNECT, reopen=self._reopen("audio", ctx))

        return part()

    async def teardown(self) -> None:
        """Hang up every publisher."""
        await self.slot.close()


def _no_publisher(device: str) -> Exception:
    return DeviceNotFound(device, [], reason="no WHIP publisher is connected")
