"""Live fMP4 tests' shared parts: a real PyAV session (x264 video, AAC audio) cut into
0.5 s fragments by mediaflow.live, FFmpeg's tools, and a reader of the boxes written."""

from __future__ import annotations

import json
import math
import shutil
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import av
import numpy as np
import pytest
from av.codec.context import Flags
from av.video.frame import PictureType

from mediaflow.live import (
    AudioTrack,
    Sample,
    TrackRun,
    VideoTrack,
    fragment,
    init_segment,
    is_keyframe,
    to_avcc,
)
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures

if TYPE_CHECKING:
    pass

FPS = 30
VIDEO_TICKS = 90000 // FPS  # one frame in the 90 kHz video timescale
AUDIO_RATE = 16000
AAC_FRAME = 1024  # samples per AAC-LC frame: one audio Sample's duration
FRAGMENT_S = 0.5
GOP = 30  # a keyframe each second: fragments 0, 2, ... start with one, 1, 3, ... do not
SECONDS = 2
WIDTH, HEIGHT = 320, 180
START_S = 3  # the session's first tfdt: 3 s on both tracks
TOOL_TIMEOUT_S = 60


# -- encoding with PyAV --------------------------------------------------------------------


@dataclass(frozen=True)
class EncodedVideo:
    extradata: bytes  # Annex B SPS + PPS (the encoder's global header)
    packets: list[bytes]  # Annex B access units, in decode order (no B-frames)
    keyframes: list[bool]  # the encoder's own keyframe flags


def encode_video(
    width: int,
    height: int,
    frames: int,
    *,
    pix_fmt: str = "yuv420p",
    preset: str = "veryfast",
    x264_params: str = "",
) -> EncodedVideo:
    """``frames`` of testsrc2 through libx264 at 30 fps, SPS and PPS in the extradata."""
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, pix_fmt
    encoder.time_base, encoder.framerate = Fraction(1, FPS), Fraction(FPS)
    encoder.gop_size = GOP
    options = {"preset": preset, "bf": "0", "sc_threshold": "0"}  # keyframes on the GOP only
    encoder.options = options | ({"x264-params": x264_params} if x264_params else {})
    encoder.flags |= Flags.global_header
    source = av.open(f"testsrc2=size={width}x{height}:rate={FPS}", format="lavfi")
    packets: list[tuple[bytes, bool]] = []
    try:
        for index, frame in enumerate(source.decode(video=0)):
            if index == frames:
                break
            picture = frame.reformat(format=pix_fmt)
            picture.pts, picture.time_base = index, encoder.time_base
            picture.pict_type = PictureType.NONE  # lavfi marks every frame I: let x264 choose
            packets += [(bytes(p), p.is_keyframe) for p in encoder.encode(picture)]
        packets += [(bytes(p), p.is_keyframe) for p in encoder.encode(None)]
    finally:
        source.close()
    assert encoder.extradata, "no global header from libx264"
    return EncodedVideo(encoder.extradata, [p for p, _ in packets], [k for _, k in packets])


def encode_tone(seconds: float) -> tuple[bytes, list[bytes]]:
    """A 440 Hz sine through PyAV's AAC-LC encoder, 16 kHz mono: (AudioSpecificConfig, frames)."""
    encoder = av.CodecContext.create("aac", "w")
    encoder.sample_rate, encoder.layout, encoder.format = AUDIO_RATE, "mono", "fltp"
    encoder.time_base = Fraction(1, AUDIO_RATE)
    encoder.open()
    tone = 0.3 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * AUDIO_RATE)) / AUDIO_RATE)
    packets: list[bytes] = []
    for start in range(0, len(tone) - AAC_FRAME + 1, AAC_FRAME):
        chunk = tone[start : start + AAC_FRAME].astype(np.float32).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout="mono")
        frame.sample_rate, frame.pts = AUDIO_RATE, start
        packets += [bytes(p) for p in encoder.encode(frame)]
    packets += [bytes(p) for p in encoder.encode(None)]
    assert encoder.extradata, "no AudioSpecificConfig from the aac encoder"
    return encoder.extradata, packets


@pytest.fixture(scope="module", name="video")
def video_fixture() -> EncodedVideo:
    return encode_video(WIDTH, HEIGHT, SECONDS * FPS)


@pytest.fixture(scope="module", name="tone")
def tone_fixture() -> tuple[bytes, list[bytes]]:
    return encode_tone(SECONDS)


# -- a live session: init segment, then fragments made one at a time -----------------------


@dataclass(frozen=True)
class Session:
    init: bytes
    fragments: list[bytes]
    runs: list[list[TrackRun]]  # what each fragment was made of
    video_track: VideoTrack
    audio_track: AudioTrack
    audio_frames: int


def video_runs(video: EncodedVideo, base: int) -> Iterator[TrackRun]:
    per_fragment = int(FPS * FRAGMENT_S)
    for first in range(0, len(video.packets), per_fragment):
        packets = video.packets[first : first + per_fragment]
        samples = [Sample(to_avcc(p), VIDEO_TICKS, is_keyframe(p)) for p in packets]
        yield TrackRun(1, base + first * VIDEO_TICKS, samples)


def audio_runs(frames: list[bytes], base: int, count: int) -> Iterator[TrackRun]:
    """``count`` runs: the frames starting in each fragment's 0.5 s, back to back from ``base``."""
    starts = [math.ceil(k * FRAGMENT_S * AUDIO_RATE / AAC_FRAME) for k in range(count)]
    for first, end in zip(starts, [*starts[1:], len(frames)], strict=True):
        samples = [Sample(frame, AAC_FRAME, keyframe=True) for frame in frames[first:end]]
        yield TrackRun(2, base + first * AAC_FRAME, samples)


@pytest.fixture(scope="module", name="session")
def session_fixture(video: EncodedVideo, tone: tuple[bytes, list[bytes]]) -> Session:
    asc, frames = tone
    video_track = VideoTrack.from_annexb(video.extradata)
    audio_track = AudioTrack(AUDIO_RATE, 1, asc)
    pictures = list(video_runs(video, START_S * 90000))
    sound = audio_runs(frames, START_S * AUDIO_RATE, len(pictures))
    runs = [[picture, audio] for picture, audio in zip(pictures, sound, strict=True)]
    fragments = [fragment(number, made) for number, made in enumerate(runs, start=1)]
    init = init_segment(video_track, audio_track)
    return Session(init, fragments, runs, video_track, audio_track, len(frames))


def write(path: Path, *parts: bytes) -> Path:
    """Appends each part as a live writer would: the init segment, then one fragment at a time."""
    with path.open("wb") as out:
        for part in parts:
            out.write(part)
    return path


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not found (apt-get install ffmpeg)")
    return found


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)


def ffprobe(path: Path) -> dict[str, Any]:
    done = run_tool(
        tool("ffprobe"), "-v", "error", "-show_streams", "-show_format", "-of", "json", str(path)
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# -- boxes, read back ----------------------------------------------------------------------

Box = tuple[bytes, int, int]  # type, offset of the box, offset of its end


def boxes(data: bytes, start: int = 0, end: int | None = None) -> list[Box]:
    """The boxes in ``data[start:end]``, which they must fill exactly."""
    found: list[Box] = []
    position, end = start, len(data) if end is None else end
    while position < end:
        size, kind = struct.unpack_from(">I4s", data, position)
        assert size >= 8, f"a box of {size} bytes at {position}"
        found.append((kind, position, position + size))
        position += size
    assert position == end, "the boxes overrun their parent"
    return found


def child(data: bytes, parent: Box, path: str) -> Box:
    """The first box along ``path`` ("traf/trun") inside ``parent``."""
    # Where children start: after the header, and after the fields of these boxes.
    header = {b"stsd": 16, b"dref": 16, b"avc1": 86, b"mp4a": 36}.get(parent[0], 8)
    name, _, rest = path.partition("/")
    for found in boxes(data, parent[1] + header, parent[2]):
        if found[0] == name.encode():
            return child(data, found, rest) if rest else found
    raise AssertionError(f"no {path} in {parent[0]!r}")


def children(data: bytes, parent: Box) -> list[bytes]:
    return [kind for kind, _, _ in boxes(data, parent[1] + 8, parent[2])]


def full_box_fields(data: bytes, found: Box) -> tuple[int, int, int]:
    """(version, flags, offset of the payload after them) of a FullBox."""
    (word,) = struct.unpack_from(">I", data, found[1] + 8)
    return word >> 24, word & 0xFFFFFF, found[1] + 12


@dataclass(frozen=True)
class ReadRun:
    """One traf as a player reads it; ``samples`` are the bytes its data_offset points at."""

    track_id: int
    tfhd_flags: int
    tfdt_version: int
    base_decode_time: int
    trun_version: int
    trun_flags: int
    durations: list[int]
    flags: list[int]
    composition_offsets: list[int]  # empty when the trun has none
    samples: list[bytes]


def read_fragment(data: bytes) -> tuple[int, list[ReadRun]]:
    """(mfhd sequence number, the trafs) of one moof + mdat; the runs' samples must fill
    the mdat exactly, in order."""
    moof, mdat = boxes(data)
    assert (moof[0], mdat[0]) == (b"moof", b"mdat")
    _, _, at = full_box_fields(data, child(data, moof, "mfhd"))
    (sequence,) = struct.unpack_from(">I", data, at)
    trafs = [found for found in boxes(data, moof[1] + 8, moof[2]) if found[0] == b"traf"]
    runs = [read_traf(data, moof, traf) for traf in trafs]
    assert b"".join(b"".join(run.samples) for run in runs) == data[mdat[1] + 8 : mdat[2]]
    return sequence, runs


def read_traf(data: bytes, moof: Box, traf: Box) -> ReadRun:
    _, tfhd_flags, at = full_box_fields(data, child(data, traf, "tfhd"))
    (track_id,) = struct.unpack_from(">I", data, at)
    tfdt_version, _, at = full_box_fields(data, child(data, traf, "tfdt"))
    (base,) = struct.unpack_from(">Q" if tfdt_version == 1 else ">I", data, at)
    trun_version, trun_flags, at = full_box_fields(data, child(data, traf, "trun"))
    assert trun_flags & 0x000701 == 0x000701  # data offset, duration, size, flags per sample
    count, position = struct.unpack_from(">Ii", data, at)
    row = struct.Struct(">IIIi" if trun_flags & 0x000800 else ">III")
    rows = [row.unpack_from(data, at + 8 + row.size * index) for index in range(count)]
    samples = []
    position += moof[1]  # default-base-is-moof: the offset counts from the moof
    for fields in rows:
        samples.append(data[position : position + fields[1]])
        position += fields[1]
    return ReadRun(
        track_id,
        tfhd_flags,
        tfdt_version,
        base,
        trun_version,
        trun_flags,
        durations=[fields[0] for fields in rows],
        flags=[fields[2] for fields in rows],
        composition_offsets=[fields[3] for fields in rows if len(fields) == 4],
        samples=samples,
    )
