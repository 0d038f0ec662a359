"""``use = "motion"``: motion events from a camera's JPEG frames, per zone.

Port ``image`` takes a camera's frames (``image/jpeg``, meta ``captured_at``,
``source`` and ``seq``) in order. Each frame is decoded to its luma at about
:data:`~mediaflow.nodes.motion_detect.ANALYSIS_WIDTH` pixels wide and compared with a
running background (:class:`~mediaflow.nodes.motion_detect.MotionAnalyser`, in a
worker thread). A zone *moves* in a frame when at least ``min_area`` of its pixels
(those no mask covers) differ from the background by more than ``threshold``. The
rules of :mod:`mediaflow.nodes.event_spans` turn moving frames into events: one
starts once a zone moved for ``min_length_s`` and ends after ``cooldown_s`` without
motion, at its last moving frame. Times are the frames' ``captured_at``.

Each event goes out on port ``event`` (``TimelineEvent.to_json()``) twice: when it
starts (``phase`` ``"start"``, ``end`` null, ``score`` the most motion so far) and when
it ends (``"end"``, with ``end``, ``score`` the largest fraction of the zone that moved,
and ``snapshot``: the frame with the most motion, the camera's own JPEG reference).
Each is also noted in the timeline index and published on the event bus
(``ctx.more.note_event``). ``zone`` names the zone (null without ``zones``).

Storage. The best frame of each event in progress is held (``ctx.more.hold``) from
the item that brought it until the event ends; then it is kept as a recording
(``ctx.more.keep``: spared for the flow's ``retention_days``, like a clip), so the
snapshot lives as long as the event is listed.

Redelivery and crashes. The background and the events in progress live in this
process's memory. A frame is measured once: redelivered in the same process after
it was (an ``emit`` failed), it is skipped, and an event that emit carried is in the
index but not on the port. After a crash the new process starts afresh at
the first frame not acked: that frame only sets the background, and an event that
was in progress had its start emitted and noted but never gets an end: the index
lists it as still lasting. Should the motion go on, a new event starts once it has
lasted ``min_length_s`` in the new process. At a clean stop, every event in progress
is noted as ended at its last moving frame, with its snapshot kept (but nothing more
is emitted on ``event``: the flow is stopping).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from mediaflow.media import MediaRef
from mediaflow.node import Context, MoreContext
from mediaflow.nodes.event_node import EventNode
from mediaflow.nodes.event_spans import (
    Sample,
    Span,
    SpanEnded,
    SpanRules,
    SpanStarted,
    advance,
    check_seconds,
)
from mediaflow.nodes.motion_detect import (
    MotionAnalyser,
    MotionInputError,
    ZoneLayout,
    decode_gray,
    parse_polygon,
)
from mediaflow.timeline.events import TimelineEvent

__all__ = ["MotionInputError", "MotionNode"]


class MotionNode(EventNode):
    """Motion events per zone (see the module doc).

    Options: ``threshold`` (25: luma levels, 0-255, a pixel must differ from the
    background by), ``min_area`` (0.01: fraction of a zone's pixels that must
    differ), ``min_length_s`` (0.5), ``cooldown_s`` (2.0), ``background_s`` (5.0: the
    background's time constant), ``zones`` (a table of named polygons; the whole
    picture without), ``masks`` (a list of polygons whose pixels are ignored).
    A polygon is a list of ``[x, y]`` points, fractions 0..1 of the picture, from its
    top left. Raises ``ValueError`` for an option out of range.
    """

    inputs: ClassVar[Mapping[str, str]] = {"image": "image"}
    outputs: ClassVar[Mapping[str, str]] = {"event": "json"}
    item = "frame"
    input_error = MotionInputError

    def __init__(
        self,
        threshold: float = 25.0,
        min_area: float = 0.01,
        min_length_s: float = 0.5,
        cooldown_s: float = 2.0,
        background_s: float = 5.0,
        zones: Mapping[str, Sequence[Any]] | None = None,
        masks: Sequence[Sequence[Any]] | None = None,
    ) -> None:
        if isinstance(threshold, bool) or not 0 <= threshold < 255:
            raise ValueError(f"threshold must be a luma difference in 0..254, got {threshold!r}")
        if isinstance(min_area, bool) or not 0 < min_area <= 1:
            raise ValueError(f"min_area must be a fraction in (0, 1], got {min_area!r}")
        if zones is not None and not zones:
            raise ValueError("zones must name at least one zone (leave it out for the picture)")
        self.min_area = float(min_area)
        self.rules = SpanRules(min_length_s, cooldown_s)
        named = {str(name): parse_polygon(p, f"zone {name!r}") for name, p in (zones or {}).items()}
        ignored = tuple(parse_polygon(p, f"mask {i}") for i, p in enumerate(masks or ()))
        layout = ZoneLayout(None if zones is None else named, ignored)
        self._analyser = MotionAnalyser(
            layout, float(threshold), check_seconds("background_s", background_s, zero=False)
        )
        self._spans: dict[str | None, Span[MediaRef]] = {}
        self._snapshots = _Snapshots()
        self._warned_empty = False
        super().__init__()

    async def run(self, ctx: Context) -> None:
        ref = ctx.inputs.get("image")
        if not isinstance(ref, MediaRef):
            return
        if ref.media_type != "image/jpeg":
            raise MotionInputError(f"{self.where(ctx, ref)} is {ref.media_type}, not image/jpeg")
        at = self.take(ctx, ref)
        if at is None:
            return  # a redelivery of a frame this process has measured
        data = await ctx.read_artifact(ref)
        # Decoding takes milliseconds (a 1080p frame ~10 ms): off the event loop.
        fractions = await asyncio.to_thread(self._measure, data, at)
        self.measured()  # the background has learnt it
        self._warn_empty_zones(ctx)
        for zone, fraction in fractions.items():
            sample = Sample(at, at, fraction >= self.min_area, fraction, ref)
            await self._advance(ctx, zone, sample)

    def _measure(self, data: bytes, at: float) -> dict[str | None, float]:
        return self._analyser.observe(decode_gray(data), at)

    def _warn_empty_zones(self, ctx: Context) -> None:
        empty = self._analyser.empty_zones
        if empty and not self._warned_empty:
            self._warned_empty = True
            ctx.log.warning("zones %s have no pixel left to watch (masked or too thin)", empty)

    async def _advance(self, ctx: Context, zone: str | None, sample: Sample[MediaRef]) -> None:
        before = self._spans.pop(zone, None)
        after, changes = advance(before, sample, self.rules)
        if after is not None:
            self._spans[zone] = after
        # The best frame of a span in progress is held; held first, let go last, so a
        # frame that stays the best (or becomes a kept snapshot) is never let go between.
        old_best = None if before is None else before.best
        new_best = None if after is None else after.best
        if new_best is not None and new_best is not old_best:
            self._snapshots.hold(ctx.more, new_best)
        for change in changes:
            if isinstance(change, SpanStarted):
                await self.announce(ctx, self._event(zone, change.span, ended=False))
            elif isinstance(change, SpanEnded):
                await self.announce(ctx, self._ended(ctx.more, zone, change.span))
        if old_best is not None and new_best is not old_best:
            self._snapshots.release(ctx.more, old_best)

    def _event(self, zone: str | None, span: Span[MediaRef], *, ended: bool) -> TimelineEvent:
        return TimelineEvent(
            "motion",
            self.source or "",
            span.start,
            span.last if ended else None,
            score=round(span.peak, 4),
            snapshot=span.best if ended else None,
            zone=zone,
        )

    def _ended(self, more: MoreContext, zone: str | None, span: Span[MediaRef]) -> TimelineEvent:
        """The event of ``span``, ended; its snapshot kept as a recording."""
        if span.best is not None:
            self._snapshots.keep(more, span.best)
        return self._event(zone, span, ended=True)

    async def teardown(self) -> None:
        """Note every event in progress as ended at its last motion (module doc)."""
        ctx, self.setup_ctx = self.setup_ctx, None
        spans, self._spans = self._spans, {}
        if ctx is None:
            return
        for zone, span in spans.items():
            if span.started:
                ctx.more.note_event(self._ended(ctx.more, zone, span))
            if span.best is not None:
                self._snapshots.release(ctx.more, span.best)


class _Snapshots:
    """The frames this node holds as the best of an event in progress, counted:
    two zones may hold the same frame, and a digest once kept as a snapshot must
    not lose its keep when a later frame with the same bytes is let go (a keep and
    a hold of one digest are one row of the store)."""

    def __init__(self) -> None:
        self._held: Counter[str] = Counter()
        self._kept: set[str] = set()  # one digest per event: small beside the events

    def hold(self, more: MoreContext, ref: MediaRef) -> None:
        if self._held[ref.digest] == 0 and ref.digest not in self._kept:
            more.hold(ref)
        self._held[ref.digest] += 1

    def release(self, more: MoreContext, ref: MediaRef) -> None:
        self._held[ref.digest] -= 1
        if self._held[ref.digest] <= 0:
            del self._held[ref.digest]
            if ref.digest not in self._kept:
                more.unhold(ref)

    def keep(self, more: MoreContext, ref: MediaRef) -> None:
        if ref.digest not in self._kept:
            more.keep(ref)
            self._kept.add(ref.digest)
