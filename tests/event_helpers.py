"""Event nodes in real flows: a sink for JSON and number ports, and the timeline index."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from mediaflow import Context, Node
from mediaflow.timeline import NotedEvent, TimelineIndex


class ValueSink(Node):
    """Keeps every value wired to it, per node and port, in arrival order."""

    inputs: ClassVar[Mapping[str, str]] = {"event": "json", "level": "number"}
    optional_inputs: ClassVar[frozenset[str]] = frozenset(inputs)
    received: ClassVar[dict[str, list[tuple[str, Any]]]] = {}

    async def setup(self, ctx: Context) -> None:
        ValueSink.received[ctx.node] = []

    async def run(self, ctx: Context) -> None:
        for port, value in ctx.inputs.items():
            ValueSink.received[ctx.node].append((port, value))

    @classmethod
    def take(cls, node: str, port: str) -> list[Any]:
        """What ``node`` received on ``port``, forgotten after (the next flow's own)."""
        values = [value for name, value in cls.received.pop(node, []) if name == port]
        return values


def noted_events(data_dir: Path, flow: str) -> list[NotedEvent]:
    index = TimelineIndex.in_data_dir(data_dir)
    try:
        return index.events(flow, 0.0, float("inf"))
    finally:
        index.close()


def run_artifacts(data_dir: Path) -> dict[str, str]:
    """Each digest the store keeps for a run, with its kind (``recording``, ``hold``)."""
    with sqlite3.connect(data_dir / "store.sqlite3") as db:
        return dict(db.execute("SELECT digest, kind FROM run_artifact").fetchall())
