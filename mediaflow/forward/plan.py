"""The forwarder's decisions, as pure functions of what it holds and what time it is.

Exactly once rests on a *cursor* per forwarded stream: the last local ``seq``
the shared queue has, written by the same commit that carries the items (a
latest value under :data:`CURSOR_NODE`, so the write is atomic with them). A
forwarder that died between that commit and its local ack finds the items
again on restart, below its cursor, and acks them without sending them twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeAlias

from mediaflow.media import MediaRef, decode_value
from mediaflow.queue.contract import NewItem, StreamKey, WorkItem
from mediaflow.store.remote import REMEMBER_MAX, REMEMBER_S

CURSOR_NODE: Final = "~forwarded"
"""The node name cursors are stored under among a flow's latest values; no
node can be named so (ids are identifiers), and readers of latest values skip it."""

FIRST_PAUSE_S: Final = 0.2
LONGEST_PAUSE_S: Final = 5.0
PROBE_EVERY_S: Final = 0.5
"""How often a forwarder whose link is down asks whether it answers again (the
cheapest call to the shared queue and a ``HEAD`` to the service): the link's
return is seen within this, however long it was away."""
IDLE_WAIT_S: Final = 1.0
"""How long an idle forwarder waits for the journal to say that new items landed
before it looks anyway (a safety net: the journal's word is what wakes it)."""
LATEST_EVERY_S: Final = 0.25
"""The ports' newest values are sent at most this often."""
LINK_CHECK_EVERY_S: Final = 5.0
"""How long an idle forwarder goes without a word from the link before it asks
whether the link answers (the probe's two questions): with nothing to send,
nothing else would notice an outage, and the link shown would read up."""


def cursor_port(edge: str, node: str) -> str:
    """The port of ``node``'s cursor for the box ``edge``: boxes forward one flow's
    streams side by side, each with its own local ``seq``."""
    return f"{edge}/{node}"


def read_cursors(latest: Mapping[tuple[str, str], Any], edge: str) -> dict[str, int]:
    """``node -> last forwarded seq`` of this box, from a flow's latest values."""
    prefix = f"{edge}/"
    return {
        port.removeprefix(prefix): int(value)
        for (node, port), value in latest.items()
        if node == CURSOR_NODE and port.startswith(prefix) and isinstance(value, int)
    }


@dataclass(frozen=True)
class Batch:
    """What to do with items claimed from the local journal.

    ``send``: in local ``seq`` order per stream, not yet in the shared queue;
    ``already``: below a stream's cursor (sent by a forwarder that died before
    its local ack), acked without sending; ``cursors``: each stream's cursor
    once ``send`` has landed."""

    send: tuple[WorkItem, ...]
    already: tuple[WorkItem, ...]
    cursors: Mapping[str, int]


def plan_batch(items: Iterable[WorkItem], cursors: Mapping[str, int]) -> Batch:
    send: list[WorkItem] = []
    already: list[WorkItem] = []
    moved: dict[str, int] = {}
    for item in sorted(items, key=lambda i: (i.stream.node, i.seq)):
        node = item.stream.node
        if item.seq <= cursors.get(node, 0):
            already.append(item)
            continue
        send.append(item)
        moved[node] = max(item.seq, moved.get(node, 0))
    return Batch(tuple(send), tuple(already), moved)


def shared_items(send: Iterable[WorkItem]) -> list[NewItem]:
    """The items to commit to the shared queue: each local item's payload as it
    is (source, port, value and emission time), ready for the flow's executors."""
    return [
        NewItem(StreamKey(i.stream.flow, i.stream.node), i.kind, i.payload, False) for i in send
    ]


def cursor_values(
    flow: str, edge: str, cursors: Mapping[str, int]
) -> dict[tuple[str, str, str], int]:
    """The latest values that record ``cursors`` in the shared queue."""
    return {(flow, CURSOR_NODE, cursor_port(edge, node)): seq for node, seq in cursors.items()}


def ref_of(item: WorkItem) -> MediaRef | None:
    """The artifact an item's value references, if it is a reference."""
    value = decode_value(item.payload.get("value"))
    return value if isinstance(value, MediaRef) else None


def pause_after(failures: int) -> float:
    """How long to wait before trying the link again after ``failures`` in a row."""
    return float(min(LONGEST_PAUSE_S, FIRST_PAUSE_S * 2 ** max(0, failures - 1)))


@dataclass(frozen=True)
class Outage:
    """The link as a failed round left it: ``failures`` full rounds failed in a row,
    the last at ``failed_at``; ``away``: a probe has failed since (the link was
    really gone, so its return is news, not a reason to pace)."""

    failures: int
    failed_at: float
    away: bool = False


@dataclass(frozen=True)
class Probe:
    """Ask the link whether it answers, after ``after_s``."""

    after_s: float


@dataclass(frozen=True)
class Retry:
    """Run a full round, after ``after_s``."""

    after_s: float


LinkStep: TypeAlias = Probe | Retry


def probed(outage: Outage, answered: bool) -> Outage:
    """``outage`` once a probe answered or not."""
    return outage if answered or outage.away else replace(outage, away=True)


def step_while_down(outage: Outage, answered: bool | None, now: float) -> LinkStep:
    """What a forwarder whose round failed does next; ``answered``: the last probe
    since (None: none yet).

    It probes every :data:`PROBE_EVERY_S` and runs a full round only once a probe
    answers: at once if a probe failed in between (the link was away and is back:
    catch up now, not up to :data:`LONGEST_PAUSE_S` later), else once
    :func:`pause_after` the failures has passed since the last one (the link
    answers probes but rounds still fail: the doubling paces them)."""
    if not answered:
        return Probe(PROBE_EVERY_S)
    if outage.away:
        return Retry(0.0)
    return Retry(max(0.0, outage.failed_at + pause_after(outage.failures) - now))


def idle_wait(now: float, latest_at: float, latest_skipped: bool, link_seen_at: float) -> float:
    """How long an idle forwarder waits for the journal's word that items landed:
    :data:`IDLE_WAIT_S`, or only until the ports' newest values are due again when
    its last look came too soon to send them (:data:`LATEST_EVERY_S`), or until the
    link is due to be asked whether it answers (:func:`link_check_due`)."""
    wait_s = IDLE_WAIT_S
    if latest_skipped:
        wait_s = min(wait_s, latest_at + LATEST_EVERY_S - now)
    return max(0.0, min(wait_s, link_seen_at + LINK_CHECK_EVERY_S - now))


def link_check_due(now: float, link_seen_at: float) -> bool:
    """Whether an idle forwarder, whose link last answered at ``link_seen_at``, asks
    it now (:data:`LINK_CHECK_EVERY_S`)."""
    return now - link_seen_at >= LINK_CHECK_EVERY_S


def uploads_to_forget(uploaded: Mapping[str, float], now: float) -> int:
    """How many of the oldest of ``uploaded`` (digest -> when the service took it,
    oldest first) to forget: beyond :data:`REMEMBER_MAX`, and every one older than
    :data:`REMEMBER_S`, which no longer spares an upload. Bounded by age too, a
    box forwarding 15 items a second holds a minute of digests, not 10,000 (~3 MiB)."""
    excess = max(0, len(uploaded) - REMEMBER_MAX)
    forget = 0
    for at in uploaded.values():
        if forget >= excess and now - at < REMEMBER_S:
            break
        forget += 1
    return forget


@dataclass
class RateBudget:
    """A token bucket of bytes: at most ``bytes_per_s`` on average, with up to a
    second's worth sent at once after a quiet spell. Time is passed in."""

    bytes_per_s: int
    allowance: float = 0.0
    at: float = field(default_factory=time.monotonic)

    def wait_for(self, size: int, now: float) -> float:
        """Take ``size`` bytes; return how long to wait before sending them."""
        self.allowance = min(
            float(self.bytes_per_s), self.allowance + (now - self.at) * self.bytes_per_s
        )
        self.at = now
        self.allowance -= size
        return 0.0 if self.allowance >= 0 else -self.allowance / self.bytes_per_s


def choose_shed(items: Iterable[WorkItem], target: int) -> list[WorkItem]:
    """The oldest waiting items whose artifacts add up to ``target`` bytes: what the
    box gives up when the link stays away longer than its disk lasts. Items with
    no artifact free nothing and are kept."""
    chosen: list[WorkItem] = []
    freed = 0
    for item in sorted(items, key=lambda i: (i.enqueued_at, i.stream.node, i.seq)):
        if freed >= target:
            break
        ref = ref_of(item)
        if ref is None:
            continue
        chosen.append(item)
        freed += ref.size
    return chosen
