"""``use = "loudness"``: the level of each audio chunk, and events while it is loud.

Port ``audio`` takes the ``audio/wav`` chunks (16-bit PCM, any rate and channel
count; meta ``captured_at``, ``source`` and ``seq``) of one stream in order. For each
chunk, port ``level`` gets its RMS level in dBFS over all its channels (:func:`dbfs`:
0 dB is a full-scale square wave, a full-scale sine is -3.01 dB), rounded to 0.01 dB;
silence is :data:`LEVEL_FLOOR_DB`, since JSON has no minus infinity.

A chunk at or above ``threshold_db`` is loud. The rules of
:mod:`mediaflow.nodes.event_spans` make loud chunks an event: it starts once the
loudness lasted ``min_length_s`` (from the first loud chunk's start to the last
one's end) and ends ``cooldown_s`` after the last loud chunk, at that chunk's end.
Times are the chunks' ``captured_at`` (wall clock), so an event is as precise as a
chunk is long. Each event goes out on port ``event`` (``TimelineEvent.to_json()``)
when it starts (``phase`` ``"start"``) and when it ends (``"end"``, ``score`` the
loudest chunk's level), and is noted in the timeline index and published on the event
bus (``ctx.more.note_event``). Loudness events have no snapshot.

Redelivery and crashes: as the motion node's (:mod:`mediaflow.nodes.motion`). The
event in progress lives in memory; a chunk is measured once per process (a
redelivery of one already measured is skipped); after a crash an event in progress
keeps its start and never gets an end, and a clean stop notes its end at the last
loud chunk.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar, Final

import numpy as np
import numpy.typing as npt

from mediaflow.media import MediaRef
from mediaflow.node import Context
from mediaflow.nodes.event_node import EventNode
from mediaflow.nodes.event_spans import (
    Sample,
    Span,
    SpanEnded,
    SpanRules,
    SpanStarted,
    advance,
)
from mediaflow.nodes.speech_audio import AudioFormatError, read_wav
from mediaflow.timeline.events import TimelineEvent

__all__ = ["LEVEL_FLOOR_DB", "LoudnessInputError", "LoudnessNode", "dbfs"]

LEVEL_FLOOR_DB: Final = -120.0
"""The level of digital silence: below anything 16-bit PCM carries (its quietest
non-zero signal is about -101 dBFS), and a finite number, as JSON needs."""

_FULL_SCALE: Final = 32768.0


class LoudnessInputError(ValueError):
    """A chunk the loudness node cannot measure (not 16-bit WAV, no ``captured_at``)."""


def dbfs(pcm: npt.NDArray[np.int16], floor: float = LEVEL_FLOOR_DB) -> float:
    """The RMS level of 16-bit samples (any shape: every channel counts) in dBFS,
    ``floor`` for silence or anything quieter. Pure."""
    if pcm.size == 0:
        return floor
    samples = pcm.astype(np.float64) / _FULL_SCALE
    rms = math.sqrt(float(np.mean(samples * samples)))
    return max(20.0 * math.log10(rms), floor) if rms > 0 else floor


class LoudnessNode(EventNode):
    """Levels and loudness events (see the module doc).

    Options: ``threshold_db`` (-30: a chunk this loud or louder is loud),
    ``min_length_s`` (0.2), ``cooldown_s`` (1.0). Raises ``ValueError`` for an
    option out of range.
    """

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}
    outputs: ClassVar[Mapping[str, str]] = {"level": "number", "event": "json"}
    item = "chunk"
    input_error = LoudnessInputError

    def __init__(
        self, threshold_db: float = -30.0, min_length_s: float = 0.2, cooldown_s: float = 1.0
    ) -> None:
        if isinstance(threshold_db, bool) or not LEVEL_FLOOR_DB < threshold_db <= 0:
            raise ValueError(
                f"threshold_db must be in ({LEVEL_FLOOR_DB:g}, 0] dBFS, got {threshold_db!r}"
            )
        self.threshold_db = float(threshold_db)
        self.rules = SpanRules(min_length_s, cooldown_s)
        self._span: Span[None] | None = None
        super().__init__()

    async def run(self, ctx: Context) -> None:
        ref = ctx.inputs.get("audio")
        if not isinstance(ref, MediaRef):
            return
        at = self.take(ctx, ref)
        if at is None:
            return  # a redelivery of a chunk this process has measured
        try:
            chunk = read_wav(await ctx.read_artifact(ref))
        except AudioFormatError as exc:
            raise LoudnessInputError(f"{self.where(ctx, ref)}: {exc}") from exc
        level = round(dbfs(np.frombuffer(chunk.pcm, dtype="<i2")), 2)
        self.measured()
        await ctx.emit("level", level)
        sample: Sample[None] = Sample(at, at + chunk.duration, level >= self.threshold_db, level)
        self._span, changes = advance(self._span, sample, self.rules)
        for change in changes:
            if isinstance(change, SpanStarted | SpanEnded):
                ended = isinstance(change, SpanEnded)
                await self.announce(ctx, self._event(change.span, ended=ended))

    def _event(self, span: Span[None], *, ended: bool) -> TimelineEvent:
        end = span.last if ended else None
        return TimelineEvent("loudness", self.source or "", span.start, end, score=span.peak)

    async def teardown(self) -> None:
        """Note the event in progress as ended at its last loud chunk (module doc)."""
        ctx, self.setup_ctx = self.setup_ctx, None
        span, self._span = self._span, None
        if ctx is not None and span is not None and span.started:
            ctx.more.note_event(self._event(span, ended=True))
