"""Cutting a live camera's encoded frames, and its microphone's AAC frames, into parts.

A *part* is one ``moof`` + ``mdat`` (:func:`mediaflow.live.fmp4.fragment`) of about
``part_s`` of video (0.5 s by default) with the audio that plays over it: what an HLS
playlist lists and what a Media Source Extensions player appends. A keyframe always
starts a new part, so every group of pictures starts a part a player can join at
(:attr:`LivePart.independent`); the others continue from the part before. A group of
pictures is an HLS *segment*: its parts, back to back, numbered by
:attr:`LivePart.segment` (the media sequence number) and :attr:`LivePart.index`
within it.

Times are seconds on the stream's clock: the camera's capture time, the same clock
the microphone's chunks carry (``captured_at``), so sound and picture line up as
they were captured. The clock's origin is the first keyframe's time; decode times are
ticks from it (90 kHz video, the sample rate for audio). A frame's duration is the
time to the next frame, so a part is finished when the frame after it arrives: one
frame of latency. Audio frames are placed by their own time; one that arrives after
its part went out rides in the next part (each run has its own ``tfdt``). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mediaflow.live.fmp4 import (
    AUDIO_TRACK_ID,
    VIDEO_TRACK_ID,
    Sample,
    TrackRun,
    fragment,
)
from mediaflow.live.h264 import to_avcc

DEFAULT_PART_S = 0.5
AAC_FRAME_SAMPLES = 1024
# Audio frames waiting for their part: more than ~10 s at 48 kHz means the video
# stopped while the sound goes on; the oldest are dropped so memory stays bounded.
MAX_WAITING_AUDIO = 512


@dataclass(frozen=True, slots=True)
class VideoFrame:
    """One encoded frame: an Annex B access unit and its capture time (seconds), in
    decode order; ``offset_s`` is how much later it is shown (a camera's B-frames).
    ``sample``: the same frame as an MP4 sample (:func:`~mediaflow.live.h264.to_avcc`),
    when the thread that made the frame converted it already (then ``data`` may be
    empty): the event loop that cuts parts then has nothing to convert."""

    data: bytes
    time_s: float
    keyframe: bool
    offset_s: float = 0.0
    sample: bytes | None = None

    def as_sample(self) -> bytes:
        return self.sample if self.sample is not None else to_avcc(self.data)


@dataclass(frozen=True, slots=True)
class AudioFrame:
    """One raw AAC frame (1024 samples) and the capture time of its first sample."""

    data: bytes
    time_s: float


@dataclass(frozen=True)
class LivePart:
    """A finished part. ``start_s`` is on the stream's clock; ``origin_s + start_s``
    is the capture time of its first frame (HLS's ``EXT-X-PROGRAM-DATE-TIME``).
    ``segment`` counts the keyframe parts before it (the segment it is part
    ``index`` of)."""

    seq: int
    data: bytes
    start_s: float
    duration_s: float
    independent: bool
    origin_s: float
    segment: int = 0
    index: int = 0

    @property
    def captured_at(self) -> float:
        return self.origin_s + self.start_s


@dataclass
class PartCutter:
    """Frames in, :class:`LivePart` out (module doc). Not thread-safe."""

    part_s: float = DEFAULT_PART_S
    audio_rate: int | None = None  # None: video only
    video_timescale: int = 90000
    origin_s: float | None = None
    _frames: list[VideoFrame] = field(default_factory=list)
    _audio: list[AudioFrame] = field(default_factory=list)
    _seq: int = 0
    # The segment of the newest part; the first is 1: hls.js (1.6) takes a newest
    # finished segment numbered 0 for none, and reloads a whole target duration later.
    _segment: int = 0
    _index: int = 0  # the newest part's place in its segment
    _audio_next: int | None = None  # the decode time the next audio frame continues at

    def add_video(self, frame: VideoFrame) -> list[LivePart]:
        """Take the next frame (in decode order, times rising); the part it finished,
        if any. Frames before the first keyframe are dropped: nothing could decode them."""
        if self.origin_s is None:
            if not frame.keyframe:
                return []
            self.origin_s = frame.time_s
        if frame.time_s <= (self._frames[-1].time_s if self._frames else float("-inf")):
            return []  # a frame that does not move time forward cannot be placed
        done: list[LivePart] = []
        # 5 % short still counts: a camera's clock jitters around the frame that
        # would close the part exactly, and one frame more is a part 7 % long at 30 fps.
        if self._frames and (
            frame.keyframe or frame.time_s - self._frames[0].time_s >= self.part_s * 0.95
        ):
            done.append(self._cut(frame.time_s))
        self._frames.append(frame)
        return done

    def add_audio(self, frame: AudioFrame) -> None:
        """Take the next AAC frame; it goes out with the part that covers it."""
        if self.audio_rate is not None:
            self._audio.append(frame)
            if len(self._audio) > MAX_WAITING_AUDIO:
                del self._audio[: len(self._audio) - MAX_WAITING_AUDIO]

    def flush(self, end_s: float | None = None) -> list[LivePart]:
        """Finish the part in progress (the stream ended); its last frame lasts until
        ``end_s``, or as long as the one before it."""
        if not self._frames:
            return []
        if end_s is None:
            last = self._frames[-1].time_s
            step = last - self._frames[-2].time_s if len(self._frames) > 1 else 1 / 30
            end_s = last + step
        return [self._cut(end_s)]

    def _cut(self, end_s: float) -> LivePart:
        assert self.origin_s is not None
        frames, self._frames = self._frames, []
        scale = self.video_timescale
        ticks = [round((f.time_s - self.origin_s) * scale) for f in frames]
        ticks.append(round((end_s - self.origin_s) * scale))
        samples = [
            Sample(f.as_sample(), ticks[i + 1] - ticks[i], f.keyframe, round(f.offset_s * scale))
            for i, f in enumerate(frames)
        ]
        runs = [TrackRun(VIDEO_TRACK_ID, ticks[0], samples)]
        audio = self._audio_run(end_s)
        if audio is not None:
            runs.append(audio)
        independent = frames[0].keyframe
        self._segment, self._index = (
            (self._segment + 1, 0) if independent else (self._segment, self._index + 1)
        )
        part = LivePart(
            seq=self._seq,
            data=fragment(self._seq + 1, runs),
            start_s=frames[0].time_s - self.origin_s,
            duration_s=end_s - frames[0].time_s,
            independent=independent,
            origin_s=self.origin_s,
            segment=self._segment,
            index=self._index,
        )
        self._seq += 1
        return part

    def _audio_run(self, end_s: float) -> TrackRun | None:
        """The AAC frames that start before ``end_s``, as one run, or None."""
        if self.audio_rate is None or self.origin_s is None:
            return None
        origin = self.origin_s
        self._audio = [a for a in self._audio if a.time_s >= origin]
        due = _back_to_back([a for a in self._audio if a.time_s < end_s], self.audio_rate)
        self._audio = self._audio[len(due) :]
        if not due:
            return None
        start = round((due[0].time_s - origin) * self.audio_rate)
        # Back to back unless a frame's own time is more than a frame off: a chunk's
        # clock jitters by milliseconds, and a run's samples must not overlap.
        if self._audio_next is not None and abs(start - self._audio_next) < AAC_FRAME_SAMPLES:
            start = self._audio_next
        start = max(start, self._audio_next or 0)
        samples = [Sample(a.data, AAC_FRAME_SAMPLES, True) for a in due]
        self._audio_next = start + AAC_FRAME_SAMPLES * len(samples)
        return TrackRun(AUDIO_TRACK_ID, start, samples)


def _back_to_back(frames: list[AudioFrame], rate: int) -> list[AudioFrame]:
    """The leading frames that follow each other without a hole: a run's samples play
    back to back, so frames after a hole (chunks the sound left out) start the next run
    at their own time."""
    step = AAC_FRAME_SAMPLES / rate
    for index in range(1, len(frames)):
        if abs(frames[index].time_s - frames[index - 1].time_s - step) > step / 2:
            return frames[:index]
    return frames
