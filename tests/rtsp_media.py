"""Media files for the RTSP cameras of the tests (tests/rtsp_server.py) and benchmarks.

:func:`rtsp_media` encodes lavfi's ``testsrc2`` and a tone into an MP4 shaped like a
camera's stream (closed groups of pictures of a fixed length, no B-frames, AAC), once
per set of arguments, into this interpreter's temp dir (:func:`session_dir`), which
is deleted at exit after the functions registered with :func:`on_exit` ran (the
servers writing their logs there stop first).
"""

from __future__ import annotations

import atexit
import heapq
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import av
from av.video.frame import PictureType

VideoCodec = Literal["h264", "h265"]
AUDIO_RATE = 48_000  # the files' AAC track; "pcmu" resamples it to 8 kHz
_before_exit: list[Callable[[], None]] = []


def on_exit(stop: Callable[[], None]) -> None:
    """Run ``stop`` at exit, before the temp dir is deleted."""
    _before_exit.append(stop)


def _at_exit() -> None:
    for stop in _before_exit:
        stop()
    while _place:
        shutil.rmtree(_place.pop(), ignore_errors=True)
    _media.clear()


_place: list[Path] = []  # at most one: the session's temp dir (media, server stderr)
_media: dict[tuple[Any, ...], Path] = {}


def session_dir() -> Path:
    """The temp dir this interpreter keeps media and server logs in, made on first
    use and deleted at exit (after every server is stopped)."""
    if not _place:
        _place.append(Path(tempfile.mkdtemp(prefix="mf-rtsp-")))
        atexit.register(_at_exit)
    return _place[0]


def rtsp_media(
    kind: VideoCodec,
    *,
    size: tuple[int, int] = (320, 240),
    fps: int = 15,
    seconds: float = 30.0,
    gop_s: float = 1.0,
) -> Path:
    """An MP4 file for a :class:`Mount`: lavfi ``testsrc2`` at ``size`` and ``fps``
    through libx264 (``kind`` "h264") or libx265 ("h265"), one I-frame (IDR) every
    ``gop_s`` seconds and no B-frames, plus a 440 Hz ``sine`` as AAC-LC, 48 kHz mono,
    ``seconds`` long, packets interleaved in time order.

    Made once per set of arguments (blocks while encoding: about a second for the
    defaults), then the same path is returned. Raises ``ValueError`` for an unknown
    ``kind``, ``av.error.FFmpegError`` if encoding fails."""
    if kind not in ("h264", "h265"):
        raise ValueError(f"kind must be 'h264' or 'h265', not {kind!r}")
    key = (kind, size, fps, seconds, gop_s)
    cached = _media.get(key)
    if cached is not None and cached.exists():
        return cached
    width, height = size
    path = session_dir() / f"{kind}-{width}x{height}-{fps}fps-{seconds:g}s-gop{gop_s:g}.mp4"
    partial = path.with_suffix(".part")
    _write_mp4(partial, kind, size, fps, seconds, max(1, round(fps * gop_s)))
    partial.replace(path)
    _media[key] = path
    return path


def _write_mp4(
    path: Path, kind: VideoCodec, size: tuple[int, int], fps: int, seconds: float, keyint: int
) -> None:
    with av.open(str(path), "w", format="mp4", options={"movflags": "+faststart"}) as out:
        video = out.add_stream("libx264" if kind == "h264" else "libx265", rate=fps)
        video.width, video.height = size
        video.pix_fmt = "yuv420p"
        video.codec_context.gop_size = keyint
        if kind == "h264":
            video.options = {"preset": "veryfast", "bf": "0", "sc_threshold": "0"}
        else:
            # closed GOPs (IDR, not CRA) like a camera's; no x265 banner and stats on stderr
            params = f"bframes=0:keyint={keyint}:min-keyint={keyint}:scenecut=0:open-gop=0"
            video.options = {"preset": "ultrafast", "x265-params": f"{params}:log-level=error"}
        audio = out.add_stream("aac", rate=AUDIO_RATE, layout="mono")
        pictures = _frames(f"testsrc2=size={size[0]}x{size[1]}:rate={fps}:duration={seconds}")
        tone = _frames(f"sine=frequency=440:sample_rate={AUDIO_RATE}:duration={seconds}")
        # In time order, so that qtdemux reads both tracks from one place in the file.
        for packet in heapq.merge(_encode(video, pictures), _encode(audio, tone), key=_decode_time):
            out.mux(packet)


def _frames(graph: str) -> Iterator[Any]:
    source = av.open(graph, format="lavfi")
    try:
        for frame in source.decode(source.streams[0]):
            if isinstance(frame, av.VideoFrame):
                frame.pict_type = PictureType.NONE  # lavfi marks every frame I: GOPs instead
            yield frame
    finally:
        source.close()


def _encode(stream: Any, frames: Iterable[Any]) -> Iterator[av.Packet]:
    for frame in frames:
        yield from stream.encode(frame)
    yield from stream.encode(None)


def _decode_time(packet: av.Packet) -> Fraction:
    return Fraction(packet.dts or 0) * (packet.time_base or Fraction(1))
