"""What a forwarder knows of its link, and how it tells of it.

The link (the shared queue and the artifact service) is up until a round fails or a
call to the shared queue hangs; it is down until a round goes through again. An
outage is reported once when it starts (``forward_unavailable``, a warning) and once
when it ends (``forward_available``, with how long it lasted, the rounds that failed
and the probes it took), however many rounds fail meanwhile.
"""

from __future__ import annotations

import logging
import time

from mediaflow.engine.events import EventBus

log = logging.getLogger("mediaflow.forward")


class Link:
    """The link of the forwarder of ``flow``, reported on ``bus`` (module doc)."""

    def __init__(self, flow: str, bus: EventBus) -> None:
        self.flow = flow
        self._bus = bus
        self.failures = 0  # rounds failed since the link last answered
        self.probes = 0  # of this outage
        self._down_since: float | None = None

    @property
    def up(self) -> bool:
        return self._down_since is None

    def probed(self) -> None:
        """A probe of the link was sent (counted for the outage's report)."""
        self.probes += 1

    def failed(self, exc: BaseException) -> None:
        """A round failed on the link with ``exc``."""
        self.failures += 1
        self.down(f"{type(exc).__name__}: {exc}")

    def down(self, why: str) -> None:
        """The link does not answer (``why``): reported if it was up."""
        if self._down_since is not None:
            return
        self._down_since = time.monotonic()
        self.probes = 0
        log.warning("forward: the link is down (%s); capture goes on here", why)
        self._bus.publish("forward_unavailable", {"flow": self.flow, "error": why})

    def answered(self) -> None:
        """A round went through: reported if the link was down."""
        failed, self.failures = self.failures, 0
        if self._down_since is None:
            return
        away = time.monotonic() - self._down_since
        self._down_since = None
        log.info(
            "forward: the link is back after %.1f s (%d round(s) failed, %d probe(s)); catching up",
            away,
            failed,
            self.probes,
        )
        self._bus.publish(
            "forward_available",
            {
                "flow": self.flow,
                "away_s": round(away, 3),
                "failed_rounds": failed,
                "probes": self.probes,
            },
        )
