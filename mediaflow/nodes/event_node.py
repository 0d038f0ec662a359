"""What the built-in event nodes (``motion``, ``loudness``) share: taking one stream's
frames or chunks once each, with their wall-clock time, and putting an event out."""

from __future__ import annotations

from typing import ClassVar

from mediaflow.media import MediaRef
from mediaflow.node import Context, Node
from mediaflow.nodes.event_spans import Captured
from mediaflow.timeline.events import TimelineEvent


class EventNode(Node):
    """Base of the event nodes. A subclass names what it reads (``item``: ``"frame"``)
    and the error a bad item raises; its ``run`` calls :meth:`take`, measures, calls
    :meth:`measured`, then :meth:`announce` for each event that starts or ends."""

    item: ClassVar[str] = "item"
    input_error: ClassVar[type[ValueError]] = ValueError

    def __init__(self) -> None:
        self.source: str | None = None  # the capturing node of the latest item
        self._last_seq: int | None = None
        self._taking: int | None = None
        self.setup_ctx: Context | None = None  # teardown ends the events in progress

    async def setup(self, ctx: Context) -> None:
        self.setup_ctx = ctx

    def where(self, ctx: Context, ref: MediaRef) -> str:
        """How a message names the item: ``MotionNode 'm': frame seq 12``."""
        return f"{type(self).__name__} {ctx.node!r}: {self.item} seq {ref.meta.get('seq')}"

    def take(self, ctx: Context, ref: MediaRef) -> float | None:
        """``ref``'s ``captured_at``; None for a redelivery of an item already measured
        (its ``seq`` seen). Raises :attr:`input_error` when it has no ``captured_at``."""
        captured = Captured.of(ref.meta)
        if captured.at is None:
            raise self.input_error(f"{self.where(ctx, ref)} has no captured_at (wall clock)")
        if not captured.is_after(self._last_seq):
            return None
        self.source = captured.source or ctx.node
        self._taking = captured.seq
        return captured.at

    def measured(self) -> None:
        """The item :meth:`take` gave was measured (the node's state learnt it): from now
        on a redelivery of it is skipped rather than measured twice."""
        self._last_seq = self._taking

    async def announce(self, ctx: Context, event: TimelineEvent) -> None:
        """Note ``event`` in the timeline index (and on the bus), then emit it on ``event``."""
        ctx.more.note_event(event)
        await ctx.emit("event", event.to_json())
