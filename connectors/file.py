"""``connector = "file"``: replay a media file's pictures, video and sound.

Ports depend on what the file holds, probed with PyAV when the flow is loaded: a
video stream gives ``image`` and ``video`` (as the camera connector emits them),
a still picture gives ``image`` only, an audio stream gives ``audio`` (as the
microphone connector does). Paced to real time unless ``realtime = false`` (then as
fast as the flow takes it, losing nothing). When the file ends, the node ends.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import av

from connectors._audio import AudioRequest
from connectors._connector import AUDIO_PORTS, VIDEO_PORTS, MediaConnector
from connectors._options import resolve_spec
from connectors.camera import video_options, video_request
from devices import DeviceNotFound
from mediaflow import Context

#: Demuxers that hold one picture, not a video.
STILL_FORMATS = frozenset({"image2", "png_pipe", "jpeg_pipe", "webp_pipe", "bmp_pipe"})


@dataclass(frozen=True)
class FileContents:
    """What a probe found in a file."""

    video: bool
    audio: bool
    still: bool

    def outputs(self) -> dict[str, str]:
        """The output ports a file with these contents gets."""
        ports: dict[str, str] = {}
        if self.video:
            ports.update({"image": "image"} if self.still else VIDEO_PORTS)
        if self.audio:
            ports.update(AUDIO_PORTS)
        return ports


def probe_file(path: str) -> FileContents:
    """Open ``path`` (a ``file:`` spec or a path) and look at its streams. Blocks
    while FFmpeg reads the headers. Raises ``DeviceNotFound`` for a missing file,
    FFmpeg's errors for an unreadable one, ``ValueError`` when the file holds neither
    pictures nor sound."""
    plain = path[len("file:") :] if path.startswith("file:") else path
    if not os.path.isfile(plain):
        raise DeviceNotFound(path, [], reason="no such file")
    with av.open(plain) as container:
        names = set(container.format.name.split(","))
        contents = FileContents(
            video=bool(container.streams.video),
            audio=bool(container.streams.audio),
            still=bool(names & STILL_FORMATS),
        )
    if not (contents.video or contents.audio):
        raise ValueError(f"{plain} has neither a video nor an audio stream")
    return contents


class FileConnector(MediaConnector):
    """Replays ``path`` (see the module doc).

    Options: ``path`` (required; relative to the flow file), ``realtime`` (True),
    the camera's ``fps``, ``quality``, ``size`` (a resize), ``segment_s``, ``codec``,
    ``copy``, ``video`` and ``image`` for pictures (an H.264 or H.265 file is copied,
    as a camera's stream is), the microphone's ``rate``, ``channels`` and
    ``chunk_ms`` for sound.
    """

    @classmethod
    def ports(cls, options: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
        """``({}, outputs)`` from a probe of the file. A relative path is looked up
        from the working directory (the hook is not told where the flow file is); if
        it is not there, every port is declared and the absent ones stay silent."""
        path = str(options.get("path", ""))
        plain = Path(path[len("file:") :] if path.startswith("file:") else path)
        if not plain.is_absolute() and not plain.exists():
            return {}, {**VIDEO_PORTS, **AUDIO_PORTS}
        return {}, probe_file(str(plain)).outputs()

    def __init__(
        self,
        path: str,
        realtime: bool | None = None,
        fps: float = 15.0,
        quality: int = 85,
        size: str | None = None,
        segment_s: float = 2.0,
        codec: str = "auto",
        video: bool | None = None,
        rate: int = 16000,
        channels: int = 1,
        chunk_ms: int = 100,
        copy: bool | None = None,
        image: bool | None = None,
    ) -> None:
        """Checks the options (``ValueError``); the file is probed again in ``setup``."""
        spec = path if path.startswith("file:") else f"file:{path}"
        options = video_options(
            fps=fps, quality=quality, segment_s=segment_s, codec=codec, video=video, image=image
        )
        super().__init__(
            path,
            video=video_request(spec, size=size, realtime=realtime, codec=codec, copy=copy),
            video_options=options,
            audio=AudioRequest(spec, rate, channels, chunk_ms, realtime),
        )
        self._spec = spec
        self._contents: FileContents | None = None

    async def setup(self, ctx: Context) -> None:
        """Probe the file, keep the parts it has, open them. Raises ``DeviceNotFound``
        for a missing file, FFmpeg's errors for an unreadable one."""
        if self._contents is None:
            spec = resolve_spec(self._spec, ctx.more.flow_dir)
            self._contents = contents = await asyncio.to_thread(probe_file, spec)
            if not contents.video:
                self.video_request = None
            elif contents.still:
                self.video_options = replace(self.video_options, video=False)
            if not contents.audio:
                self.audio_request = None
        await super().setup(ctx)
