"""Unplug and replug: keep a live source going across device losses.

:func:`supervise` consumes one opened input after another. When a live input fails
(:class:`devices.DeviceLost`, or a network stream that simply ends) it publishes
``device_lost``, sleeps through capped exponential backoff
(:func:`devices.backoff_delays`), tries to reopen after each delay (a device still
unplugged raises :class:`devices.DeviceNotFound`: keep waiting), and publishes
``device_restored`` once an input is open again. A finite source (file, lavfi) that
ends just ends. Configuration errors on reopen (:class:`devices.UnsupportedMode`: the
replugged camera is a different one) are raised: retrying cannot fix them.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import av

from connectors._timeline import Resume, Timeline
from devices import DeviceLost, DeviceNotFound, backoff_delays
from mediaflow import Context

STOP_POLL_S = 0.1  # how often a backoff sleep looks at ctx.stopping()


class InputInfo(Protocol):
    @property
    def is_live(self) -> bool: ...


class Input(Protocol):
    """What :func:`supervise` needs of an opened input (a video or audio input)."""

    @property
    def info(self) -> InputInfo: ...

    async def aclose(self) -> None: ...


InputT = TypeVar("InputT", bound=Input)

#: Failures of a live input that mean "gone for now", not "misconfigured".
LOST_ERRORS: tuple[type[BaseException], ...] = (DeviceLost, OSError, av.FFmpegError)
REOPEN_ERRORS: tuple[type[BaseException], ...] = (DeviceNotFound, *LOST_ERRORS)


@dataclass(frozen=True)
class Reconnect:
    """Backoff between reopen attempts: ``base_s``, doubling, capped at ``max_s``;
    ``loop``: a file or virtual source that ends starts again from the beginning."""

    base_s: float = 0.5
    max_s: float = 10.0
    loop: bool = False

    def __post_init__(self) -> None:
        if self.base_s <= 0 or self.max_s < self.base_s:
            raise ValueError(
                f"reconnect delays need 0 < base ({self.base_s}) <= max ({self.max_s})"
            )


async def supervise(
    ctx: Context,
    device: str,
    first: InputT,
    *,
    consume: Callable[[InputT], Awaitable[None]],
    reopen: Callable[[], Awaitable[InputT]],
    policy: Reconnect,
    on_lost: Callable[[], None] = lambda: None,
) -> None:
    """Consume ``first``, then every reopened input, until the source ends or the flow
    stops. Closes each input. Cancellable.

    ``consume`` returns when its input ended (or the flow is stopping) and raises what
    the input raised; ``on_lost`` runs right after a loss (e.g. to close a segment).
    Whether the source is live comes from ``first.info.is_live``. Raises what
    ``consume`` raises except, for a live source, the :data:`LOST_ERRORS`.
    """
    live = first.info.is_live
    source: InputT | None = first
    while source is not None:
        try:
            await consume(source)
            error: BaseException = EOFError("the stream ended")
        except LOST_ERRORS as exc:
            if not live:
                raise
            error = exc
        finally:
            await source.aclose()
        if ctx.stopping():
            return
        if not live:
            if not policy.loop:
                return
            # Played to the end: again from the start (seq and pts carry on).
            source = await reopen()
            continue
        lost_at = time.monotonic()
        ctx.log.warning("%s lost: %s", device, error)
        ctx.more.publish("device_lost", device=device, error=f"{type(error).__name__}: {error}")
        on_lost()
        source = await _reopen(ctx, device, reopen, policy, lost_at)


async def _reopen(
    ctx: Context,
    device: str,
    reopen: Callable[[], Awaitable[InputT]],
    policy: Reconnect,
    lost_at: float,
) -> InputT | None:
    """The reopened input, or None when the flow started stopping meanwhile."""
    waited = 0.0
    for attempt, delay in enumerate(backoff_delays(policy.base_s, policy.max_s), start=1):
        if await sleep_unless_stopping(ctx, delay):
            return None
        waited += delay
        try:
            source = await reopen()
        except REOPEN_ERRORS as exc:
            ctx.log.info("%s: reopen attempt %d failed: %s", device, attempt, exc)
            continue
        down_s = time.monotonic() - lost_at
        ctx.log.warning("%s restored after %.1f s (%d attempts)", device, down_s, attempt)
        ctx.more.publish(
            "device_restored",
            device=device,
            attempts=attempt,
            waited_s=round(waited, 6),
            down_s=round(down_s, 6),
        )
        return source
    raise AssertionError("backoff_delays is infinite")  # pragma: no cover


async def sleep_unless_stopping(ctx: Context, seconds: float) -> bool:
    """Sleep ``seconds``, waking early once the flow stops; True if it is stopping."""
    deadline = time.monotonic() + seconds
    while not ctx.stopping():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(left, STOP_POLL_S))
    return True


class SourceRun(ABC, Generic[InputT]):
    """Base of the video and audio runs: one device, its timeline, its reconnects."""

    def __init__(
        self,
        ctx: Context,
        device: str,
        resume: Resume | None,
        *,
        seeked_at: float | None = None,
    ) -> None:
        """``seeked_at``: see :class:`~connectors._timeline.Timeline`."""
        self.ctx = ctx
        self.device = device
        self.timeline = Timeline(resume, seeked_at=seeked_at)

    @abstractmethod
    async def consume(self, source: InputT) -> None:
        """Emit what ``source`` yields until it ends or the flow stops."""

    def on_lost(self) -> None:
        """Called right after the device was lost, before the backoff."""

    async def supervise(
        self, first: InputT, *, policy: Reconnect, reopen: Callable[[], Awaitable[InputT]]
    ) -> None:
        """:func:`supervise` with this run's ``consume`` and ``on_lost``."""
        await supervise(
            self.ctx,
            self.device,
            first,
            consume=self.consume,
            reopen=reopen,
            policy=policy,
            on_lost=self.on_lost,
        )
