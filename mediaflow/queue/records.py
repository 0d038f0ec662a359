"""What every backend stores the same way: compact JSON, dead-letter records, and
the backlog summed per flow.

Pure. A dead letter keeps its item as one JSON record, so any backend can give
it back whole (:func:`dead_record` / :func:`item_of_record`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from mediaflow.queue.contract import StreamBacklog, StreamKey, WorkItem

dumps: Final = json.JSONEncoder(separators=(",", ":")).encode
"""Compact JSON, as stored; one prebuilt encoder (``json.dumps`` with options
builds one per call). Like ``json.dumps`` it writes NaN and infinities as the
non-standard ``NaN``/``Infinity`` tokens, which ``json.loads`` reads back."""


def dead_record(item: WorkItem) -> str:
    """The JSON record a dead letter keeps of ``item``."""
    return dumps(
        {
            "entry_id": item.entry_id,
            "flow": item.stream.flow,
            "node": item.stream.node,
            "kind": item.kind,
            "payload": dict(item.payload),
            "seq": item.seq,
            "deliveries": item.deliveries,
            "enqueued_at": item.enqueued_at,
        }
    )


def item_of_record(record: str | bytes) -> WorkItem:
    """The item a :func:`dead_record` describes."""
    d: dict[str, Any] = json.loads(record)
    return WorkItem(
        d["entry_id"],
        StreamKey(d["flow"], d["node"]),
        d["kind"],
        d["payload"],
        d["seq"],
        d["deliveries"],
        d["enqueued_at"],
    )


def per_flow(backlog: Mapping[StreamKey, StreamBacklog]) -> dict[str, int]:
    """Unacked items per flow, from a backlog per stream (flows with none omitted)."""
    flows: dict[str, int] = {}
    for stream, waiting in backlog.items():
        flows[stream.flow] = flows.get(stream.flow, 0) + waiting.total
    return flows
