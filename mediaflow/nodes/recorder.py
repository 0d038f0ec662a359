"""``use = "recorder"``: a camera's ``video`` segments joined into clips, audio muxed in.

Port ``video`` takes the camera's segments (fragmented MP4 with H.264, or WebM with
VP8/VP9; each starts with a keyframe) in order; the optional port ``audio`` takes
``audio/wav`` chunks of one stream. Every ``clip_s`` seconds of video becomes one
clip on output ``video``: a plain MP4 (``movflags=+faststart``, AAC audio) or a WebM
(Opus audio), seekable in a browser, with meta ``seq``, ``start`` and ``end``
(wall clock, the segments' ``captured_at``), ``duration``, ``video_codec``,
``audio_codec`` (None without audio), ``size``, ``width``, ``height`` and ``frames``.

Video is never re-encoded: packets are copied. Clips are cut only at segment
boundaries (each segment starts on a keyframe), so a clip holds a whole number of
segments: make ``clip_s`` a multiple of the camera's ``segment_s`` and each clip lasts
``clip_s`` to within a frame. A clip also ends early at a hole in the video (a
reconnect), or where the codec or the frame size changes.

Audio is laid out on the clip's wall-clock timeline by each chunk's ``captured_at``
(silence where no chunk covers it), so both tracks start together at 0. A clip whose
video is complete waits for the audio covering its end, until video ``audio_wait_s``
seconds later arrives (then the missing part is silence). Chunks ending more than
``audio_margin_s`` before the oldest unfinished clip are dropped, and at most
``max_audio_s`` seconds are kept, so the buffer is bounded whatever the sources do.

Storage. Each segment's item is acked as it arrives while the node keeps the
reference in memory and reads the file only when the clip is muxed, so it *holds*
every segment it takes (``ctx.more.hold``: garbage collection and the disk cap leave it)
and lets go (``ctx.more.unhold``) once the clip using it is muxed, or dropped (a failed
mux, a stop). Audio chunks are decoded as they arrive and kept as PCM, so their
references need no hold. Each clip is kept as a recording (``ctx.more.keep``: spared for
the flow's ``retention_days``, evicted oldest first under a disk cap). Each is noted in the
timeline index too (``ctx.more.note_clip``), with its wall-clock span and the camera
and microphone it holds, so ``/api/recordings`` lays the clips out in time.

Keeping only events (``keep = "events"``, Frigate's "retain by motion"). With
events wired to input ``event`` (a motion or loudness node's ``event`` port), a clip
holds only what an event covers, from ``pre_s`` before its start to ``post_s`` after
its end. The pre-roll comes from segments already captured: every segment is held
as it arrives and waits until an event wants it or none can (the newest video is
``pre_s + lag_s`` past its end; ``lag_s`` is how late an event may arrive after its
start), then joins a clip or is let go (see :mod:`.recorder_retain`). A clip ends
once it covers every known event's window. Continuous recording (``keep = "all"``,
the default) keeps every segment whatever happens; events then only mark the
timeline.

Crashes and stops. A clip is saved whole and atomically (written to a temp file in
a directory under the data dir, then saved by path), kept, and only then emitted: a
crash or a stop mid-clip leaves every earlier clip intact and playable. The clip in
progress (its segments were acked as they arrived) is lost, as are its audio and
any temp file; its segments' holds end at a stop, and a day after a crash. A
redelivered segment already taken is skipped. Muxing blocks, so it runs in a
worker thread.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import deque
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import ClassVar, Literal

from mediaflow.config import ConfigError
from mediaflow.media import MediaRef
from mediaflow.node import Context, Node
from mediaflow.nodes.recorder_mux import MuxedClip, SegmentFile, mux_clip
from mediaflow.nodes.recorder_parts import (
    AUDIO_NAMES,
    Chunk,
    Clip,
    Segment,
    lay_out_audio,
    number,
    read_wav_chunk,
    segment_of,
)
from mediaflow.nodes.recorder_retain import EventWindows, Verdict
from mediaflow.timeline.events import EventError, TimelineEvent


class RecorderNode(Node):
    """Joins video segments into clips of ``clip_s`` and muxes audio in (module doc).

    Options: ``clip_s`` (10), ``audio_wait_s`` (how much later video a finished clip
    waits for its audio, ``clip_s``), ``audio_margin_s`` (audio kept before the oldest
    unfinished clip, 1), ``max_audio_s`` (audio buffer bound, 120); ``keep`` (``"all"``,
    or ``"events"``: only what the events on input ``event`` cover, from ``pre_s``
    (5) before each to ``post_s`` (5) after, waiting up to ``lag_s`` (10) for an
    event to arrive after its start; see :mod:`.recorder_retain`).
    """

    inputs: ClassVar[Mapping[str, str]] = {"video": "video", "audio": "audio", "event": "json"}
    optional_inputs: ClassVar[frozenset[str]] = frozenset({"audio", "event"})
    outputs: ClassVar[Mapping[str, str]] = {"video": "video"}

    def __init__(
        self,
        clip_s: float = 10.0,
        audio_wait_s: float | None = None,
        audio_margin_s: float = 1.0,
        max_audio_s: float = 120.0,
        keep: Literal["all", "events"] = "all",
        pre_s: float = 5.0,
        post_s: float = 5.0,
        lag_s: float = 10.0,
    ) -> None:
        for name, value in (("clip_s", clip_s), ("max_audio_s", max_audio_s)):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if audio_margin_s < 0 or (audio_wait_s is not None and audio_wait_s < 0):
            raise ValueError("audio_wait_s and audio_margin_s must not be negative")
        if min(pre_s, post_s, lag_s) < 0:
            raise ValueError("pre_s, post_s and lag_s must not be negative")
        if keep not in ("all", "events"):
            raise ValueError(f"keep must be 'all' or 'events', got {keep!r}")
        self.keep = keep
        # Segments no event wanted yet (keep = "events"), oldest first; held meanwhile.
        self._waiting: deque[Segment] = deque()
        self._windows = EventWindows(pre_s, post_s, lag_s)
        self._newest = float("-inf")  # the capture time of the newest video's end
        self.clip_s = float(clip_s)
        self.audio_wait_s = float(clip_s if audio_wait_s is None else audio_wait_s)
        self.audio_margin_s = float(audio_margin_s)
        self.max_audio_s = float(max_audio_s)
        self._open = Clip()
        self._ready: deque[Clip] = deque()
        self._audio: deque[Chunk] = deque()
        self._audio_end = float("-inf")
        self._video_end = float("-inf")  # wall clock of the newest video seen
        self._last_seq: int | None = None
        self._clip_seq = 0
        self._has_audio = True
        self._temp: Path | None = None
        self._setup_ctx: Context | None = None  # to let go of held segments at teardown
        self._audio_source: str | None = None  # the microphone, for the timeline's events

    async def setup(self, ctx: Context) -> None:
        if self.keep == "events" and not ctx.more.is_wired("event"):
            raise ConfigError(
                f"recorder {ctx.node!r}: keep = 'events' needs its input 'event' wired"
                " (a motion or loudness node's event port): without events it records nothing"
            )
        if self.keep == "all" and ctx.more.is_wired("event"):
            ctx.log.warning("input 'event' is wired but keep = 'all': every segment is recorded")
        self._has_audio = ctx.more.is_wired("audio")
        self._setup_ctx = ctx
        self._temp = ctx.more.temp_dir()
        latest = ctx.more.latest("video")
        if isinstance(latest, MediaRef) and isinstance(latest.meta.get("seq"), int):
            self._clip_seq = int(latest.meta["seq"]) + 1

    async def run(self, ctx: Context) -> None:
        video = ctx.inputs.get("video")
        if isinstance(video, MediaRef):
            segment = segment_of(video)
            if self._is_new(segment):
                ctx.more.hold(video)  # before this item is acked: read again at mux time
                self._last_seq = segment.seq
                self._newest = max(self._newest, segment.captured_at + segment.duration)
                if self.keep == "events":
                    self._waiting.append(segment)
                else:
                    self._take_video(segment)
        event = ctx.inputs.get("event")
        if event is not None:
            self._take_event(event)
        if self.keep == "events":
            self._settle(ctx)
        audio = ctx.inputs.get("audio")
        if isinstance(audio, MediaRef):
            if isinstance(audio.meta.get("source"), str):
                self._audio_source = audio.meta["source"]
            data = await ctx.read_artifact(audio)
            self._take_audio(read_wav_chunk(data, number(audio.meta, "captured_at")))
        while self._ready and self._can_finish(self._ready[0]):
            await self._finish(ctx, self._ready.popleft())
        self._trim_audio()

    def _sources_of(self, segment: Segment) -> tuple[str, ...]:
        """The capturing nodes a clip holds: its camera, and its microphone if any."""
        camera = segment.ref.meta.get("source")
        found = (camera if isinstance(camera, str) else None, self._audio_source)
        return tuple(dict.fromkeys(name for name in found if name))

    def _is_new(self, segment: Segment) -> bool:
        """False for a redelivery of a segment already taken."""
        return segment.seq is None or self._last_seq is None or segment.seq > self._last_seq

    def _take_event(self, value: object) -> None:
        if not isinstance(value, Mapping):
            raise EventError(
                f"input 'event' takes events (JSON objects), got {type(value).__name__}"
            )
        event = TimelineEvent.from_json(value)
        self._windows.note((event.type, event.source, event.zone), event.start, event.end)

    def _settle(self, ctx: Context) -> None:
        """Take the waiting segments an event wants, let go of those none can want,
        in capture order, up to the first still undecided (module doc)."""
        while self._waiting:
            segment = self._waiting[0]
            verdict = self._windows.decide(segment.captured_at, segment.end_at, self._newest)
            if verdict is Verdict.WAIT:
                break
            self._waiting.popleft()
            if verdict is Verdict.KEEP:
                self._take_video(segment)
                if self._windows.all_end_by(segment.end_at):
                    self._close_open()  # the events' clip is whole: out with it now
            else:
                self._close_open()  # the next kept segment starts a clip of its own
                ctx.more.unhold(segment.ref)
        oldest = self._waiting[0].captured_at if self._waiting else self._newest
        self._windows.forget_before(oldest)

    def _take_video(self, segment: Segment) -> None:
        clip = self._open
        if clip.segments and not segment.follows(clip.segments[-1]):
            self._close_open()
            clip = self._open
        clip.segments.append(segment)
        self._video_end = max(self._video_end, clip.end)
        if clip.duration >= self.clip_s - 0.5 / segment.fps:
            self._close_open()

    async def teardown(self) -> None:
        """The clips still waiting are lost (module docstring): let go of their segments."""
        ctx, self._setup_ctx = self._setup_ctx, None
        waiting = [*self._ready, self._open, Clip(list(self._waiting))]
        self._ready.clear()
        self._waiting.clear()
        self._open = Clip()
        if ctx is None:
            return
        for clip in waiting:
            for segment in clip.segments:
                ctx.more.unhold(segment.ref)

    def _close_open(self) -> None:
        if self._open.segments:
            self._ready.append(self._open)
        self._open = Clip()

    def _take_audio(self, chunk: Chunk) -> None:
        self._audio.append(chunk)
        self._audio_end = max(self._audio_end, chunk.end)

    def _can_finish(self, clip: Clip) -> bool:
        slack = 0.5 / clip.segments[-1].fps
        return (
            not self._has_audio
            or self._audio_end >= clip.end - slack
            or self._video_end - clip.end > self.audio_wait_s
        )

    def _trim_audio(self) -> None:
        pending = self._ready[0] if self._ready else self._open
        oldest = pending.start if pending.segments else self._audio_end
        if self._waiting:  # a waiting segment may still become a clip: keep its sound
            oldest = min(oldest, self._waiting[0].captured_at)
        horizon = oldest - self.audio_margin_s
        while self._audio and self._audio[0].end < horizon:
            self._audio.popleft()
        while self._audio and self._audio_end - self._audio[0].end > self.max_audio_s:
            self._audio.popleft()

    async def _finish(self, ctx: Context, clip: Clip) -> None:
        """Mux, save, keep and emit ``clip``; its segments are let go whatever happens."""
        try:
            await self._mux_and_emit(ctx, clip)
        finally:
            for segment in clip.segments:
                ctx.more.unhold(segment.ref)

    async def _mux_and_emit(self, ctx: Context, clip: Clip) -> None:
        first = clip.segments[0]
        files = [
            SegmentFile(ctx.more.artifact_path(s.ref), s.pts - first.pts, s.duration)
            for s in clip.segments
        ]
        audio = None
        if self._has_audio:
            chunks = [c for c in self._audio if c.end > clip.start and c.captured_at < clip.end]
            audio = lay_out_audio(chunks, clip.start, clip.duration)
        suffix = ".webm" if first.ref.media_type == "video/webm" else ".mp4"
        media_type = "video/webm" if suffix == ".webm" else "video/mp4"
        # File work off the event loop: a camera's clips are megabytes.
        folder = Path(await asyncio.to_thread(tempfile.mkdtemp, None, "clip-", self._temp))
        try:
            out = folder / f"clip{suffix}"
            copy_sound = not self._has_audio and first.audio_codec is not None
            muxed: MuxedClip = await asyncio.to_thread(
                partial(mux_clip, files, media_type, audio, out, copy_sound=copy_sound)
            )
            meta = {
                "seq": self._clip_seq,
                "start": clip.start,
                "end": clip.end,
                "captured_at": clip.start,
                "duration": round(clip.duration, 6),
                "video_codec": muxed.video_codec,
                "audio_codec": AUDIO_NAMES.get(muxed.audio_codec or "", muxed.audio_codec),
                "size": muxed.size,
                "width": first.width,
                "height": first.height,
                "frames": muxed.frames,
                "segments": len(files),
                "keep": self.keep,
            }
            ref = await ctx.save_artifact(out, media_type, meta)
        finally:
            await asyncio.to_thread(shutil.rmtree, folder, True)
        ctx.more.keep(ref)  # a small SQLite write, on the loop as the store expects
        ctx.more.note_clip(ref, clip.start, clip.end, self._sources_of(first))
        self._clip_seq += 1
        await ctx.emit("video", ref)
