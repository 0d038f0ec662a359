"""The JSON shapes of ``/api/flows`` and ``/api/flows/{flow}``, built from plain facts.

Pure functions: the handlers in :mod:`.api` gather facts (a runner's live
state, or what the state store recorded, and the queue's backlog) and these
turn them into JSON-ready dicts. A latest value is shown as it travels on
the wire: a media reference as its JSON object (``digest``, ``media_type``,
``size``, ``meta``), anything else as the value itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from mediaflow.engine.snapshot import FlowSnapshot
from mediaflow.engine.state_store import RunRecord
from mediaflow.flows import FlowSpec
from mediaflow.live.hub import LiveHub
from mediaflow.media import MEDIA_KINDS, present_value
from mediaflow.queue import DeadLetter, StreamBacklog, StreamKey, WorkItem

PREVIEW_CHARS = 300
"""A dead letter's payload is shown as at most this many characters of its JSON."""
REASON_CHARS = 2000


def guess_kind(encoded: Any) -> str:
    """A port's kind when no flow spec says it (``serve`` without the flow running)."""
    if isinstance(encoded, Mapping) and len(encoded) == 1 and "$ref" in encoded:
        ref = encoded["$ref"]
        media_type = ref.get("media_type", "") if isinstance(ref, Mapping) else ""
        top = str(media_type).split("/", 1)[0].lower()
        return top if top in MEDIA_KINDS else "json"
    if isinstance(encoded, str):
        return "text"
    if isinstance(encoded, int | float) and not isinstance(encoded, bool):
        return "number"
    return "json"


def backlog_view(backlog: StreamBacklog | None, now: float) -> dict[str, Any]:
    """Waiting work of one consumer: items by state, and the oldest item's age in seconds."""
    if backlog is None:
        return {"items": 0, "ready": 0, "pending": 0, "delayed": 0, "oldest_s": None}
    oldest = backlog.oldest_enqueued_at
    return {
        "items": backlog.total,
        "ready": backlog.ready,
        "pending": backlog.pending,
        "delayed": backlog.delayed,
        "oldest_s": None if oldest is None else round(max(0.0, now - oldest), 3),
    }


def run_view(run: RunRecord | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {
        "run_id": run.run_id,
        "started_at": run.started_at,
        "heartbeat_at": run.heartbeat_at,
        "ended_at": run.ended_at,
        "outcome": run.outcome,
    }


def live_flow_view(
    spec: FlowSpec,
    *,
    latest: Mapping[tuple[str, str], Any],
    ids: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
    counts: Mapping[StreamKey, tuple[int, bool]],
    backlog: Mapping[StreamKey, StreamBacklog],
    run: RunRecord | None,
    now: float,
    control: Mapping[str, Any] | None = None,
    live: LiveHub | None = None,
) -> dict[str, Any]:
    """A running flow: every node and port from its spec, with live numbers. A port's
    latest value comes with its emission's identity from ``ids`` (``seq``, and
    ``item`` when the node ran for an input item), as in ``latest`` events.
    ``control``: the flow's state (:func:`control_state`), merged in. ``live``: the
    session's live hub (a node with a ready feed links to it)."""
    ids = ids or {}
    nodes = []
    for node_id, node in spec.nodes.items():
        stream = StreamKey(spec.name, node_id)
        waiting, running = counts.get(stream, (0, False))
        cls = node.node_class
        nodes.append(
            {
                "id": node_id,
                "role": "source" if node.is_source else "node",
                "class": f"{cls.__module__}:{cls.__qualname__}",
                "inputs": {
                    port: {
                        "kind": kind,
                        "from": str(node.inputs[port]) if port in node.inputs else None,
                    }
                    for port, kind in node.input_kinds.items()
                },
                "outputs": {
                    port: {
                        "kind": kind,
                        "latest": present_value(latest.get((node_id, port))),
                        **ids.get((node_id, port), {}),
                    }
                    for port, kind in node.output_kinds.items()
                },
                "in_memory": {"waiting": waiting, "running": running},
                "backlog": backlog_view(backlog.get(stream), now),
            }
        )
        feed = None if live is None else live.feed(spec.name, node_id)
        if feed is not None and feed.ready:
            nodes[-1]["live"] = f"/live/{spec.name}/{node_id}"
    return {
        "name": spec.name,
        "live": True,
        **(control or {"status": None}),
        "run": run_view(run),
        "nodes": nodes,
        "edges": [{"from": str(e.source), "to": str(e.target)} for e in spec.edges],
    }


def stored_flow_view(
    name: str,
    *,
    latest: Mapping[tuple[str, str], Any],
    backlog: Mapping[StreamKey, StreamBacklog],
    run: RunRecord | None,
    now: float,
) -> dict[str, Any]:
    """A flow that is not running here: nodes and ports as the state store and the
    queue know them (kinds guessed from the latest values; no classes, no edges)."""
    node_ids = sorted({node for node, _ in latest} | {s.node for s in backlog if s.flow == name})
    nodes = []
    for node_id in node_ids:
        outputs = {
            port: {"kind": guess_kind(value), "latest": present_value(value)}
            for (node, port), value in sorted(latest.items())
            if node == node_id
        }
        nodes.append(
            {
                "id": node_id,
                "role": None,
                "class": None,
                "inputs": {},
                "outputs": outputs,
                "in_memory": None,
                "backlog": backlog_view(backlog.get(StreamKey(name, node_id)), now),
            }
        )
    return {
        "name": name,
        "live": False,
        "status": None,  # not run by this process: nothing here can tell or change it
        "run": run_view(run),
        "nodes": nodes,
        "edges": [],
    }


def flow_summary(view: Mapping[str, Any]) -> dict[str, Any]:
    """One line of ``/api/flows`` from a full flow view."""
    nodes = view["nodes"]
    return {
        "name": view["name"],
        "live": view["live"],
        "status": view.get("status"),
        "nodes": len(nodes),
        "ports": sum(len(n["outputs"]) for n in nodes),
        "backlog": sum(n["backlog"]["items"] for n in nodes),
        "run": view["run"],
    }


def control_state(snapshot: FlowSnapshot) -> dict[str, Any]:
    """A running flow's state as flow control changes it: ``status`` (``running``,
    ``paused``, ``disabled`` or ``stopping``) and the flags it is made of."""
    return {
        "status": snapshot.status,
        "paused": snapshot.paused,
        "disabled": snapshot.disabled,
        "stopping": snapshot.stopping,
    }


def control_view(snapshot: FlowSnapshot, *, changed: bool) -> dict[str, Any]:
    """The answer of a flow-control request: the flow's new state, whether the
    request changed it, and what the runner holds."""
    return {
        "flow": snapshot.flow,
        **control_state(snapshot),
        "changed": changed,
        "run_id": snapshot.run_id,
        "in_memory": snapshot.in_memory,
        "finished_items": snapshot.finished_items,
    }


def iso_time(epoch: float) -> str:
    """``2024-05-01T12:00:00.250Z``: a Unix time in UTC, milliseconds."""
    when = datetime.fromtimestamp(epoch, UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _bounded(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit] + "…", True)


def item_view(item: WorkItem) -> dict[str, Any]:
    """A queue item's identity (not its payload)."""
    return {
        "flow": item.stream.flow,
        "node": item.stream.node,
        "entry_id": item.entry_id,
        "seq": item.seq,
        "kind": item.kind,
        "deliveries": item.deliveries,
        "enqueued_at": item.enqueued_at,
    }


def dead_letter_view(dead: DeadLetter) -> dict[str, Any]:
    """One dead letter for an operator: which item, why, when (Unix time and ISO
    8601), and its payload as JSON text cut to :data:`PREVIEW_CHARS` (the
    payload itself can be a whole transcript or a big JSON value)."""
    payload = json.dumps(dead.item.payload, separators=(",", ":"), ensure_ascii=False, default=str)
    preview, cut = _bounded(payload, PREVIEW_CHARS)
    reason, _ = _bounded(dead.reason, REASON_CHARS)
    item = dead.item
    return {
        "id": dead.id,
        "node": item.stream.node,
        "seq": item.seq,
        "entry_id": item.entry_id,
        "kind": item.kind,
        "deliveries": item.deliveries,
        "reason": reason,
        "dead_at": dead.dead_at,
        "dead_at_iso": iso_time(dead.dead_at),
        "payload_preview": preview,
        "payload_truncated": cut,
    }
