"""What a running flow looks like from outside, frozen at one moment.

The HTTP API, ``/metrics`` and the wall read a runner through
:meth:`~mediaflow.engine.runner.FlowRunner.snapshot` only: a copy, so a reader
never holds a reference into state the engine keeps changing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mediaflow.flows import FlowSpec
from mediaflow.queue.contract import StreamKey


@dataclass(frozen=True)
class FlowSnapshot:
    """One flow run as its runner sees it.

    ``latest``: the newest encoded value per ``(node, port)`` (references as
    ``{"$ref": ...}``), as emitted, durable or not; ``latest_ids`` which emission
    each is. ``told``: per port, the newest value live views were told (durable:
    see :meth:`~mediaflow.engine.events.LatestThrottle.told`) and its identity.
    ``lines``: per stream, items held in memory and not running, and whether one runs.
    ``finished_items``: node runs this process finished; ``started_items``: per
    node, items that reached its run (emit-to-start latency recorded).
    ``failed_sources``: per source whose last run ended by an error and that has
    not started again, that error.
    """

    spec: FlowSpec
    run_id: str | None
    latest: Mapping[tuple[str, str], Any]
    latest_ids: Mapping[tuple[str, str], Mapping[str, int]]
    lines: Mapping[StreamKey, tuple[int, bool]]
    paused: bool
    stopping: bool
    finished_items: int
    started_items: Mapping[str, int]
    disabled: bool = False
    told: Mapping[tuple[str, str], tuple[Any, Mapping[str, int]]] = field(default_factory=dict)
    failed_sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """``running``, ``paused``, ``disabled`` or ``stopping``, as the API shows it."""
        if self.stopping:
            return "stopping"
        return "disabled" if self.disabled else "paused" if self.paused else "running"

    @property
    def flow(self) -> str:
        return self.spec.name

    @property
    def in_memory(self) -> int:
        """Items held in memory, running ones included."""
        return sum(waiting + running for waiting, running in self.lines.values())
