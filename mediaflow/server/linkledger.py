"""Which artifacts a flow's ports were seen holding, and when: what a wall link may read.

A wall link opens the artifacts its flow's ports hold now or held during the
link's window. The server cannot ask the past, so it writes it down: each
time it observes a flow's latest values (a ``latest`` event on the bus, a
flow view it answers, a fresh read for a link) it notes, per port, every
digest those values reference and the time it saw them held. A digest is
any ``sha256:<64 hex>`` in the value's JSON, so a reference's ``meta`` that
names other artifacts counts too.

Bounded: ``per_port`` digests per ``(flow, node, port)``, the least recently
seen dropped first, and ``max_ports`` ports in all, the least recently
observed dropped first. In memory only: after a restart a link reaches what
is held now and what is seen from then on. Not thread-safe (the loop's).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

DIGEST_IN_TEXT = re.compile(r"(?<![0-9a-f])sha256:[0-9a-f]{64}(?![0-9a-f])")
MAX_PORTS = 4096

PortKey = tuple[str, str, str]
"""``(flow, node, port)``."""


def digests_in(value: Any) -> frozenset[str]:
    """Every digest a JSON-like value mentions, in strings and in mapping keys.

    Walks with an explicit stack (a deeply nested ``json`` port value cannot
    exhaust the recursion limit). Pure.
    """
    found: set[str] = set()
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "sha256:" in item:
                found.update(DIGEST_IN_TEXT.findall(item))
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return frozenset(found)


class DigestLedger:
    """Per port of each flow, the digests its latest values referenced and the last
    time each was seen held (Unix seconds, the caller's clock)."""

    def __init__(self, per_port: int, max_ports: int = MAX_PORTS) -> None:
        if per_port < 1 or max_ports < 1:
            raise ValueError("a ledger keeps at least one digest and one port")
        self.per_port = per_port
        self.max_ports = max_ports
        self._ports: OrderedDict[PortKey, OrderedDict[str, float]] = OrderedDict()
        self._by_flow: dict[str, set[PortKey]] = {}

    def observe(self, flow: str, node: str, port: str, value: Any, now: float) -> None:
        """Note that port ``node.port`` of ``flow`` holds ``value`` at ``now``."""
        digests = digests_in(value)
        key = (flow, node, port)
        held = self._ports.get(key)
        if held is None:
            if not digests:
                return  # a port that never held an artifact costs nothing
            held = self._ports[key] = OrderedDict()
            self._by_flow.setdefault(flow, set()).add(key)
            self._evict_ports()
        else:
            self._ports.move_to_end(key)
        for digest in digests:
            held[digest] = max(now, held.get(digest, now))
            held.move_to_end(digest)
        while len(held) > self.per_port:
            held.popitem(last=False)

    def observe_all(self, flow: str, latest: Mapping[tuple[str, str], Any], now: float) -> None:
        """:meth:`observe` every ``(node, port) -> value`` of ``latest``."""
        for (node, port), value in latest.items():
            self.observe(flow, node, port, value, now)

    def held_since(self, flow: str, digest: str, since: float) -> bool:
        """Whether a port of ``flow`` was seen holding ``digest`` at ``since`` or later."""
        for key in self._by_flow.get(flow, ()):
            seen = self._ports[key].get(digest)
            if seen is not None and seen >= since:
                return True
        return False

    def ports(self, flow: str) -> Iterable[PortKey]:
        """The ports of ``flow`` with a record (for tests and diagnostics)."""
        return sorted(self._by_flow.get(flow, ()))

    def _evict_ports(self) -> None:
        while len(self._ports) > self.max_ports:
            key, _ = self._ports.popitem(last=False)
            flow_ports = self._by_flow[key[0]]
            flow_ports.discard(key)
            if not flow_ports:
                del self._by_flow[key[0]]
