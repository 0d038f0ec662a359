"""References a runner holds in memory that nothing durable names yet: its GC horizon.

A node that saves an artifact holds the only reference to it until the
reference becomes durable somewhere garbage collection looks (a committed
emission or latest value, a keep or a hold) or the node run ends (the node
dropped it). Until then the runner *pins* it: :class:`Pins` remembers, per
digest, the earliest time a save of it started, and :meth:`Pins.horizon` is
the earliest of those (now, if none). The heartbeat writes it into the run
record; a sweep deletes nothing saved at or after the horizon of a live run.

A save's start time is taken before the store is called, so it is at or
before the ``saved_at`` the store records. A save still running counts from
its start too (:meth:`Pins.saving`): the store may have recorded it before
the node gets the reference back to pin.

Each node run (a :class:`~mediaflow.engine.context.RunContext`) keeps the
pins it took in a :data:`Held` dict and gives each back exactly once; a
source's run may last forever, so a pin taken more than :data:`STALE_PIN_S`
ago is dropped (logged at debug) rather than holding every sweep back for
good. A save still running is never dropped (it may yet be pinned). Pins
are plain objects compared by identity, so a context giving back a pin that
was dropped as stale never releases a newer pin of the same digest.

Everything here runs on the event-loop thread and costs a dict operation.
"""

from __future__ import annotations

import itertools
import logging
from typing import Final, TypeAlias

log = logging.getLogger("mediaflow.engine")

STALE_PIN_S: Final = 3600.0
"""A pin older than this is dropped: a source holding a reference for an hour
without emitting, keeping or holding it has let it go."""


class Pin:
    """One digest held unemitted by ``holders`` node runs: the earliest of their
    saves started at ``started``, the latest pinned it at ``pinned_at``."""

    __slots__ = ("digest", "holders", "pinned_at", "started")

    def __init__(self, digest: str, started: float, pinned_at: float) -> None:
        self.digest = digest
        self.started = started
        self.pinned_at = pinned_at
        self.holders = 1


Held: TypeAlias = dict[str, Pin]
"""The pins one node run holds, by digest."""


class Pins:
    """The unemitted references of one runner."""

    def __init__(self) -> None:
        self._pins: dict[str, Pin] = {}
        self._saving: dict[int, float] = {}  # saves in progress: token -> start
        self._tokens = itertools.count()

    def __len__(self) -> int:
        return len(self._pins)

    def saving(self, started: float) -> int:
        """A save began at ``started``; returns the token to pass to :meth:`saved`."""
        token = next(self._tokens)
        self._saving[token] = started
        return token

    def saved(self, token: int) -> None:
        """The save of ``token`` ended (pin its reference before the next await)."""
        self._saving.pop(token, None)

    def take(self, held: Held, digest: str, started: float, now: float) -> None:
        """Pin ``digest`` for the run that holds ``held``: its save started at
        ``started`` and returned at ``now``."""
        if digest in held:
            return  # one pin per run and digest; the first save is the earliest
        pin = self._pins.get(digest)
        if pin is None:
            pin = self._pins[digest] = Pin(digest, started, now)
        else:
            pin.holders += 1
            pin.started = min(pin.started, started)
            pin.pinned_at = max(pin.pinned_at, now)
        held[digest] = pin

    def give_back(self, pin: Pin) -> None:
        """A holder of ``pin`` no longer needs it (a no-op for a pin dropped as stale)."""
        if self._pins.get(pin.digest) is pin:
            pin.holders -= 1
            if pin.holders <= 0:
                del self._pins[pin.digest]

    def release(self, held: Held, digest: str) -> None:
        """The run holding ``held`` made ``digest`` durable (kept it, held it)."""
        pin = held.pop(digest, None)
        if pin is not None:
            self.give_back(pin)

    def release_all(self, held: Held) -> None:
        """The run holding ``held`` ended: whatever it still holds, it dropped."""
        for pin in held.values():
            self.give_back(pin)
        held.clear()

    def horizon(self, now: float) -> float:
        """The earliest start of a pinned or running save, or ``now``; drops stale
        pins first (a save still running is never stale)."""
        earliest = min(now, *self._saving.values()) if self._saving else now
        if not self._pins:
            return earliest
        stale = now - STALE_PIN_S
        for digest, pin in list(self._pins.items()):
            if pin.pinned_at < stale:
                log.debug(
                    "dropping the GC pin of %s: held unemitted for over %.0f s",
                    digest,
                    STALE_PIN_S,
                )
                del self._pins[digest]
            elif pin.started < earliest:
                earliest = pin.started
        return earliest
