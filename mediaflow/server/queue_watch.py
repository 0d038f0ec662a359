"""The server's word on a work queue that does not answer: once an outage, not once
a request.

The API's views and the metrics scrape ask the queue for its backlog and newest
values; while it does not answer, each goes on without them (an empty backlog,
``mediaflow_queue_up`` 0). A wall polls every second and Prometheus scrapes every few,
so a warning per request would bury the log: the first failure of an outage is a
warning, the ones after it debug lines, and the first answer after it an info line
saying how long the queue was away and how many calls met it so.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("mediaflow.http")


class QueueWatch:
    """Whether the queue answered the server's last call, logged as the module says."""

    def __init__(self) -> None:
        self._down_since: float | None = None
        self._failed = 0  # calls that met it away, this outage

    @property
    def up(self) -> bool:
        return self._down_since is None

    def failed(self, what: str, exc: BaseException) -> None:
        """A call for ``what`` (the backlog, a flow's latest values) did not answer."""
        self._failed += 1
        first = self._down_since is None
        if first:
            self._down_since = time.monotonic()
        level = logging.WARNING if first else logging.DEBUG
        log.log(level, "the work queue does not answer (%s; views go on without it): %s", what, exc)

    def answered(self) -> None:
        """A call answered: an outage, if there was one, is over."""
        if self._down_since is None:
            return
        log.info(
            "the work queue answers again after %.1f s (%d call(s) met it away)",
            time.monotonic() - self._down_since,
            self._failed,
        )
        self._down_since, self._failed = None, 0
