"""Audio and video in a recorded live stream, against when the sources made them.

The flow's camera flashes a white box at the start of every second of its source
clock and the microphone beeps at the start of every second of its own
(:mod:`bench.live.flow`). A viewer recorded the live stream
(:class:`bench.live.hls.Recording`); :func:`decode` reads it back with PyAV: the
box's mean luma per video frame and the sound's RMS per millisecond, each on the
stream's clock (``tfdt`` seconds). A part's ``PROGRAM-DATE-TIME`` minus its video
``tfdt`` is the stream's origin on the capture clock (:func:`stream_origin`), so a
stream time plus the origin is a capture time.

When the sources made each event comes from the items' meta: ``captured_at - pts``
of the camera's images is when its source second 0 was captured (the *anchor*), so
flash ``k`` was captured at ``cam_anchor + k``; the same for the microphone's chunks
and beep ``j``. :func:`events` turns onsets into errors (observed - expected) and
:func:`offsets` pairs each flash with the beep made nearest to it: the A/V offset is
``audio error - video error`` (positive: the sound plays late against the picture).
A feed's sound is encoded only from a viewer's first read on, and a viewer starts up
to a GOP back, so :func:`analyse` leaves out what was captured before the viewer came.
Everything but :func:`decode` is pure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt

from bench.live.flow import BOX, CAMERA, MICROPHONE
from bench.live.hls import RecordedPart

VIDEO_TRACK = 1
AUDIO_TRACK = 2
VIDEO_TIMESCALE = 90000
RMS_WINDOW_S = 0.001
QUIET_S = 0.3  # a beep starts after this long below the threshold
MIN_CONTRAST = 40.0  # luma levels: less between dark and flash is no flash at all
PAIR_WITHIN_S = 0.5
# Sound is encoded from the first read of a feed on (a chunk or two queued before it
# may be too): events captured before ``started + HEARD_AFTER_S`` are left out.
HEARD_AFTER_S = 0.5
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Decoded:
    """A recording read back: per video frame and per millisecond of sound."""

    video_times: Floats  # stream seconds of each frame
    video_levels: Floats  # the flash box's mean luma
    audio_times: Floats  # stream seconds of each RMS window's start
    audio_rms: Floats  # RMS of each window (full scale 1.0)


@dataclass(frozen=True)
class Event:
    """One flash or beep: its source second, when the stream says it was captured,
    and that minus when the source made it."""

    second: int
    observed: float
    error: float


def decode(path: Path, box: int = BOX) -> Decoded:
    """Decode the recording at ``path`` (blocks). Raises PyAV's errors for a file
    that does not decode at all; one without sound gives empty audio arrays."""
    times: list[float] = []
    levels: list[float] = []
    sound: list[tuple[float, npt.NDArray[np.float32], int]] = []
    inner = slice(box // 20, box - box // 20)  # off the box's edges: codec ringing
    with av.open(str(path)) as container:
        pictures = container.streams.video[:1]
        for video in pictures:
            video.thread_type = "AUTO"  # frame threads: decoding 720p is the slow part
        streams: list[av.VideoStream | av.AudioStream] = [*pictures, *container.streams.audio[:1]]
        for frame in container.decode(*streams):
            if isinstance(frame, av.VideoFrame) and frame.time is not None:
                plane = frame.planes[0]
                luma = np.frombuffer(memoryview(plane), np.uint8).reshape(-1, plane.line_size)
                times.append(frame.time)
                levels.append(float(luma[inner, inner].mean()))
            elif isinstance(frame, av.AudioFrame) and frame.time is not None:
                pcm = frame.to_ndarray().astype(np.float32)
                mono = pcm.mean(axis=0) if frame.format.is_planar else pcm.reshape(-1)
                sound.append((frame.time, mono, frame.sample_rate))
    audio_times, audio_rms = rms_windows(sound)
    return Decoded(np.array(times), np.array(levels), audio_times, audio_rms)


def rms_windows(
    frames: Iterable[tuple[float, npt.NDArray[np.float32], int]], window_s: float = RMS_WINDOW_S
) -> tuple[Floats, Floats]:
    """(start times, RMS) of ``window_s`` windows over decoded sound frames, each
    given as (stream time, mono samples, rate). Pure."""
    starts: list[Floats] = []
    values: list[Floats] = []
    for start, samples, rate in frames:
        size = max(1, round(window_s * rate))
        whole = len(samples) - len(samples) % size
        if whole == 0:
            continue
        blocks = samples[:whole].astype(np.float64).reshape(-1, size)
        values.append(np.sqrt((blocks**2).mean(axis=1)))
        starts.append(start + np.arange(whole // size) * size / rate)
    if not values:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(starts), np.concatenate(values)


def video_onsets(times: Floats, levels: Floats) -> list[float]:
    """Stream times of the frames where the flash box lights up: bright, after a dark
    frame at most 1.5 frames before it. The threshold is halfway between the dark and
    the lit level (5th and 95th percentiles); none if they differ by less than
    ``MIN_CONTRAST``. Pure."""
    if len(times) < 3:
        return []
    low, high = np.percentile(levels, [5, 95])
    if high - low < MIN_CONTRAST:
        return []
    threshold = (low + high) / 2
    step = float(np.median(np.diff(times)))
    lit = levels >= threshold
    return [
        float(times[i])
        for i in range(1, len(times))
        if lit[i] and not lit[i - 1] and times[i] - times[i - 1] <= 1.5 * step
    ]


def audio_onsets(times: Floats, rms: Floats, quiet_s: float = QUIET_S) -> list[float]:
    """Start times of the windows where a beep begins: at least a quarter of the
    loudest window's RMS, after ``quiet_s`` of sound below that (with no hole in the
    recording in between). Pure."""
    if len(rms) == 0 or float(rms.max()) <= 0:
        return []
    loud = rms >= 0.25 * float(rms.max())
    step = float(np.median(np.diff(times))) if len(times) > 1 else RMS_WINDOW_S
    found = []
    last_loud = -np.inf
    for i in np.flatnonzero(loud):
        t = float(times[i])
        if t - last_loud > quiet_s:
            first = int(np.searchsorted(times, t - quiet_s))
            covered = i - first >= round(quiet_s / step) - 1
            contiguous = covered and float(np.max(np.diff(times[first : i + 1]))) < 2 * step
            if first > 0 and contiguous:
                found.append(t)
        last_loud = t
    return found


def stream_origin(parts: Sequence[RecordedPart]) -> tuple[float, float]:
    """(origin, spread): the median over parts of ``PROGRAM-DATE-TIME - video tfdt``
    in epoch seconds, and how far apart the parts' values are (the tag has
    millisecond precision). Raises ``ValueError`` without a dated part."""
    origins = [
        part.pdt - part.decode_times[VIDEO_TRACK] / VIDEO_TIMESCALE
        for part in parts
        if part.pdt is not None and VIDEO_TRACK in part.decode_times
    ]
    if not origins:
        raise ValueError("no part with a PROGRAM-DATE-TIME and a video tfdt")
    return statistics.median(origins), max(origins) - min(origins)


def events(onsets: Iterable[float], origin: float, anchor: float) -> list[Event]:
    """Each onset (stream seconds) as an :class:`Event` against source seconds
    ``anchor + k`` (the nearest ``k``). Pure."""
    found = []
    for onset in onsets:
        observed = origin + onset
        second = round(observed - anchor)
        found.append(Event(second, observed, observed - (anchor + second)))
    return found


def offsets(
    video: Sequence[Event], audio: Sequence[Event], cam_anchor: float, mic_anchor: float
) -> list[float]:
    """``audio.error - video.error`` for each flash and the beep made nearest to it
    (within ``PAIR_WITHIN_S``); flashes without such a beep are left out. Pure."""
    made = {beep.second: mic_anchor + beep.second for beep in audio}
    by_second = {beep.second: beep for beep in audio}
    paired = []
    for flash in video:
        at = cam_anchor + flash.second
        nearest = min(made, key=lambda s: abs(made[s] - at), default=None)
        if nearest is not None and abs(made[nearest] - at) <= PAIR_WITHIN_S:
            paired.append(by_second[nearest].error - flash.error)
    return paired


def paired(flashes: Sequence[float], beeps: Sequence[float]) -> list[float]:
    """``beep - flash`` for each flash and the beep nearest to it (within
    ``PAIR_WITHIN_S``), both on one clock: a file's flashes and beeps made together
    give the A/V offset directly. Pure."""
    found = []
    for flash in flashes:
        beep = min(beeps, key=lambda b: abs(b - flash), default=None)
        if beep is not None and abs(beep - flash) <= PAIR_WITHIN_S:
            found.append(beep - flash)
    return found


def file_offsets(
    decoded: Decoded, parts: Sequence[RecordedPart], started: float | None = None
) -> list[float]:
    """:func:`paired` over a recording of a file's own picture and sound, leaving out
    what was captured before the viewer ``started`` (see :func:`analyse`). Pure."""
    origin, _ = stream_origin(parts)
    heard = -math.inf if started is None else started + HEARD_AFTER_S
    flashes = video_onsets(decoded.video_times, decoded.video_levels)
    beeps = audio_onsets(decoded.audio_times, decoded.audio_rms)
    return paired(
        [t for t in flashes if origin + t >= heard], [t for t in beeps if origin + t >= heard]
    )


def anchors(body: Mapping[str, Any]) -> dict[str, list[float]]:
    """``captured_at - pts`` of the camera's and the microphone's latest items in a
    ``GET /api/flows/{flow}`` answer: ``{"cam": [...], "mic": [...]}``. Pure."""
    found: dict[str, list[float]] = {CAMERA: [], MICROPHONE: []}
    for node in body.get("nodes", []):
        if node.get("id") not in found:
            continue
        for output in node.get("outputs", {}).values():
            meta = (output.get("latest") or {}).get("meta") or {}
            pts, captured = meta.get("pts"), meta.get("captured_at")
            if isinstance(pts, int | float) and isinstance(captured, int | float):
                found[node["id"]].append(float(captured) - float(pts))
    return found


@dataclass(frozen=True)
class SyncResult:
    """One recording's events and offsets; times in seconds."""

    parts: int
    origin_spread: float
    anchor_spread: float  # how much the camera's captured_at - pts varied
    video: list[Event]
    audio: list[Event]
    offsets: list[float]


def analyse(
    decoded: Decoded,
    parts: Sequence[RecordedPart],
    cam: Sequence[float],
    mic: Sequence[float],
    started: float | None = None,
) -> SyncResult:
    """Events and offsets of a decoded recording, given the sources' anchors; events
    captured before the viewer ``started`` (+ ``HEARD_AFTER_S``) are left out. Pure.
    Raises ``ValueError`` when an anchor or the stream's origin is missing."""
    if not cam or not mic:
        raise ValueError("no captured_at/pts from the camera or the microphone")
    origin, spread = stream_origin(parts)
    cam_anchor, mic_anchor = statistics.median(cam), statistics.median(mic)
    heard = -math.inf if started is None else started + HEARD_AFTER_S
    flashes = video_onsets(decoded.video_times, decoded.video_levels)
    beeps = audio_onsets(decoded.audio_times, decoded.audio_rms)
    video = [e for e in events(flashes, origin, cam_anchor) if e.observed >= heard]
    audio = [e for e in events(beeps, origin, mic_anchor) if e.observed >= heard]
    return SyncResult(
        parts=len(parts),
        origin_spread=spread,
        anchor_spread=max(cam) - min(cam),
        video=video,
        audio=audio,
        offsets=offsets(video, audio, cam_anchor, mic_anchor),
    )
