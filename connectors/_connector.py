"""The node shell every built-in connector shares: open in ``setup``, emit in ``run``.

Opening in ``setup`` makes a wrong device, a size or rate it does not offer, or a
missing file fail the flow at start with the device layer's message (which lists what
is available), instead of a source that dies later. The opened inputs are handed to
``run``; if ``run`` is never called (a resumed run whose source had already finished),
``teardown`` closes them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from connectors._audio import AudioRequest, AudioRun
from connectors._copy_run import PacketRun
from connectors._options import resolve_spec
from connectors._reconnect import Reconnect
from connectors._timeline import Resume, read_resume
from connectors._together import run_together
from connectors._video import VideoRun
from connectors._video_request import VideoOptions, VideoRequest
from devices import AudioInput, PacketInput, VideoInput
from devices.redact import public_url
from mediaflow import Context, Node

VIDEO_PORTS: Mapping[str, str] = {"image": "image", "video": "video"}
AUDIO_PORTS: Mapping[str, str] = {"audio": "audio"}


class MediaConnector(Node):
    """A source node emitting a video part (``image``/``video``) and/or an audio
    part (``audio``). Subclasses set the requests in ``__init__``."""

    outputs: ClassVar[Mapping[str, str]] = {}

    def __init__(
        self,
        device: str,
        *,
        video: VideoRequest | None = None,
        video_options: VideoOptions | None = None,
        audio: AudioRequest | None = None,
        reconnect: Reconnect | None = None,
    ) -> None:
        # As the flow wrote it, without a password: the ``device`` in meta, events and logs.
        self.device = public_url(device)
        self.video_request = video
        self.video_options = video_options or VideoOptions()
        self.audio_request = audio
        self.reconnect = reconnect or Reconnect()
        self.video_run: VideoRun | PacketRun | None = None
        self.audio_run: AudioRun | None = None
        self._video_input: VideoInput | PacketInput | None = None
        self._audio_input: AudioInput | None = None

    def resolve_paths(self, flow_dir: Path) -> None:
        """Make relative ``file:`` specs absolute against the flow file's directory."""
        if self.video_request is not None:
            spec = resolve_spec(self.video_request.spec, flow_dir)
            self.video_request = replace(self.video_request, spec=spec)
        if self.audio_request is not None:
            spec = resolve_spec(self.audio_request.spec, flow_dir)
            self.audio_request = replace(self.audio_request, spec=spec)

    async def setup(self, ctx: Context) -> None:
        """Open the inputs. Raises the device layer's errors (``DeviceNotFound``,
        ``UnsupportedMode``, ``PortAudioMissing`` ...) and ``ValueError`` for options
        that do not fit the source."""
        self.resolve_paths(ctx.more.flow_dir)
        await self.teardown()  # a second setup (engine retry) must not leak the first
        if self.video_request is not None:
            self._video_input = await self.video_request.open_async()
        if self.audio_request is not None:
            try:
                self._audio_input = await self.audio_request.open_async()
            except BaseException:
                await self.teardown()
                raise

    async def run(self, ctx: Context) -> None:
        """Emit until the source ends or the flow stops (see the module doc)."""
        ports = [
            *(VIDEO_PORTS if self.video_request else ()),
            *(AUDIO_PORTS if self.audio_request else ()),
        ]
        resume = read_resume(ctx, ports)
        if (self.video_request is not None and self._video_input is None) or (
            self.audio_request is not None and self._audio_input is None
        ):
            await self.setup(ctx)  # run again after a failed run: open afresh
        video_at, audio_at = await self._seek_files(ctx, resume)
        video_input, self._video_input = self._video_input, None
        audio_input, self._audio_input = self._audio_input, None
        parts: list[Coroutine[Any, Any, None]] = []
        if self.video_request is not None and video_input is not None:
            parts.append(self._video_part(ctx, video_input, audio_input, resume, video_at))
        if self.audio_request is not None and audio_input is not None:
            self.audio_run = AudioRun(ctx, self.device, resume, seeked_at=audio_at)
            reopen_audio = self.audio_request.open_async
            parts.append(
                self.audio_run.run(audio_input, policy=self.reconnect, reopen=reopen_audio)
            )
        await run_together(*parts)

    def _video_part(
        self,
        ctx: Context,
        video_input: VideoInput | PacketInput,
        audio_input: AudioInput | None,
        resume: Resume | None,
        video_at: float | None,
    ) -> Coroutine[Any, Any, None]:
        """The run of the video input: copying its packets, or decoding its pictures."""
        request = self.video_request
        assert request is not None
        options = self.video_options
        if (
            audio_input is not None
            and options.live_audio is None
            and options.codec in ("h264", "auto")
        ):
            options = replace(options, live_audio=ctx.node)  # a file's own sound, live
        if isinstance(video_input, PacketInput):
            copying = PacketRun(
                ctx, request, options, resume, device=self.device, seeked_at=video_at
            )
            self.video_run = copying
            reopen_packets = _reopen_as(PacketInput, request.open_async)
            return copying.run(video_input, policy=self.reconnect, reopen=reopen_packets)
        decoding = VideoRun(ctx, request, options, resume, device=self.device, seeked_at=video_at)
        self.video_run = decoding
        reopen_frames = _reopen_as(VideoInput, request.open_async)
        return decoding.run(video_input, policy=self.reconnect, reopen=reopen_frames)

    async def _seek_files(
        self, ctx: Context, resume: Resume | None
    ) -> tuple[float | None, float | None]:
        """Reopen a resumed run's files where it stopped; the pts (video, audio) they
        continue at, None for an input that does not continue that way.

        Replaying a file from its start would emit again everything the crashed run
        emitted; a file continues instead from :meth:`Resume.resume_at` of the ports
        it feeds (the earliest end among those read or emitted, so a port that lagged
        loses nothing; the others emit a little again). Live inputs continue after a
        gap (see :mod:`connectors._timeline`), and so does a looping file, whose pts
        grow across passes (its position is not a source pts). Raises what opening
        raises, after closing both inputs.
        """
        if resume is None or self.reconnect.loop:
            return None, None

        def start_for(ports: Iterable[str]) -> float:
            fed = [p for p in ports if p in resume.ends or ctx.more.has_readers(p)]
            return resume.resume_at(fed)

        try:
            video, video_at = self._video_input, None
            if video is not None and video.info.kind == "file" and not video.info.is_live:
                video_at = start_for(VIDEO_PORTS)
                if video_at > 0 and self.video_request is not None:
                    self._video_input = None
                    await video.aclose()
                    self._video_input = await self.video_request.open_async(video_at)
            audio, audio_at = self._audio_input, None
            # (A stream's sound is opened as a "file" too, but it is live.)
            if audio is not None and audio.info.kind == "file" and not audio.info.is_live:
                audio_at = start_for(AUDIO_PORTS)
                if audio_at > 0 and self.audio_request is not None:
                    self._audio_input = None
                    await audio.aclose()
                    self._audio_input = await self.audio_request.open_async(audio_at)
        except BaseException:
            await self.teardown()
            raise
        return video_at, audio_at

    async def teardown(self) -> None:
        """Close inputs opened by ``setup`` that ``run`` never took."""
        video, self._video_input = self._video_input, None
        audio, self._audio_input = self._audio_input, None
        if video is not None:
            await video.aclose()
        if audio is not None:
            await audio.aclose()


InputT = TypeVar("InputT", VideoInput, PacketInput)


def _reopen_as(
    kind: type[InputT], open_async: Callable[[], Awaitable[VideoInput | PacketInput]]
) -> Callable[[], Awaitable[InputT]]:
    """``open_async`` for a run that copies (``PacketInput``) or decodes (``VideoInput``):
    a source that comes back sending video the other way (a camera switched from H.264
    to MJPEG) is a ``ValueError``, not a reconnect: the flow must be started again."""

    async def reopen() -> InputT:
        opened = await open_async()
        if isinstance(opened, kind):
            return opened
        await opened.aclose()
        now = "is copied" if isinstance(opened, PacketInput) else "cannot be copied"
        raise ValueError(
            f"{opened.spec} now sends {opened.info.codec} video, which {now}: start the flow again"
        )

    return reopen
