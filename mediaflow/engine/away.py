"""When a dependency is away: which failures mean it, how long to wait, what to tell.

An edge box's uplink drops, and the artifact service or the queue stops
answering for a while; a sink's broker or web service goes down (the node
raises :class:`~mediaflow.node.DependencyAway`). That is not the fault of the
node that met it, and running it again at once will not help: it waits and
carries on. It is not failed, retried as a failure, dead-lettered or (a source)
ended. A node's wait is told once when it begins and once when it ends
(:func:`waited`), not at every try. These are the pure decisions. The waiting
is done in two places. :mod:`.outages` makes a source's saves wait. The reducer retries an item that
failed only because of an outage after a backoff, and the retry costs no attempt
(``NodeFinishedTick.away``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from mediaflow.node import DependencyAway
from mediaflow.queue.contract import QueueUnavailable
from mediaflow.redact import scrub
from mediaflow.store import RemoteStoreError, StoreUnreachable

Dependency = str
"""``"store"``, ``"queue"``, or the name a node's :class:`~mediaflow.node.DependencyAway`
gives its service (``"mqtt"``)."""

PAUSE_FIRST_S: Final = 0.2
PAUSE_MAX_S: Final = 5.0
"""A save waits at most this long between two tries. A service that comes back
is therefore noticed within about this long, plus the client's own retries
(about 0.35 s, :class:`~mediaflow.store.service.RetryPolicy`)."""

# A reverse proxy in front of the service (TLS: docs/scale-out.md) answers these when
# the service behind it is down or restarting: the service is away, not refusing.
_PROXY_AWAY: Final = frozenset({502, 503, 504})


def away_from(exc: BaseException) -> Dependency | None:
    """Which dependency ``exc`` says is away: ``"store"`` (the artifact service did
    not answer, or its proxy said it is down), ``"queue"`` (the queue could not be
    reached), the service a node named (:class:`~mediaflow.node.DependencyAway`),
    or None for any other failure. A full store (:class:`StoreFull`) is not away:
    it needs an operator, not patience."""
    if isinstance(exc, DependencyAway):
        return exc.dependency
    if isinstance(exc, StoreUnreachable):
        return "store"
    if isinstance(exc, RemoteStoreError) and exc.status in _PROXY_AWAY:
        return "store"
    if isinstance(exc, QueueUnavailable):
        return "queue"
    return None


def pause_s(failures: int) -> float:
    """Seconds to wait after the ``failures``-th try in a row failed (1-based):
    :data:`PAUSE_FIRST_S`, doubling, at most :data:`PAUSE_MAX_S`."""
    return float(min(PAUSE_MAX_S, PAUSE_FIRST_S * 2 ** (max(failures, 1) - 1)))


@dataclass(frozen=True, slots=True)
class Outage:
    """What one node knows of the store being away. ``since`` is when its first
    failed try of this outage failed (None while the store answers).
    ``ended_at`` is when the last outage ended. Times are monotonic seconds."""

    since: float | None = None
    ended_at: float = -math.inf


def on_failed(outage: Outage, tried_at: float, now: float) -> tuple[Outage, bool]:
    """A try begun at ``tried_at`` failed at ``now`` because the store is away.
    Returns the outage as it is now, and whether it began (to be told once).

    A try begun before the last outage ended belongs to that outage: it began
    while the store was still away (several saves of one node may be in flight),
    so it begins nothing."""
    if outage.since is not None or tried_at < outage.ended_at:
        return outage, False
    return Outage(since=now, ended_at=outage.ended_at), True


def on_landed(outage: Outage, now: float) -> tuple[Outage, float | None]:
    """A try landed at ``now``. Returns the outage as it is now, and how long the
    store was away if this ended an outage (to be told once), else None."""
    if outage.since is None:
        return outage, None
    return Outage(ended_at=now), now - outage.since


def without_userinfo(text: str) -> str:
    """``text`` with the password of every URL in it removed (:func:`mediaflow.redact.scrub`).
    Nothing told about an outage (an event, a log line) may carry a secret. The token
    is never in a URL: it travels in a header."""
    return scrub(text)


@dataclass(frozen=True, slots=True)
class Wait:
    """A node waiting for ``dependency``, away since its first try met it at ``since``
    (monotonic seconds); ``tries``: the tries of it that met it away."""

    dependency: Dependency
    since: float
    tries: int = 1


def waited(wait: Wait | None, dependency: Dependency, now: float) -> Wait:
    """A node's wait once a try met ``dependency`` away at ``now``: the same wait one
    try longer, or a new one (to be told) when it was not waiting for it."""
    if wait is None or wait.dependency != dependency:
        return Wait(dependency, now)
    return Wait(dependency, wait.since, wait.tries + 1)
