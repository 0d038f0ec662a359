"""The event types mediaflow publishes, and the fields each carries: one registry.

Every event on the bus has a type (a name) and a JSON object of fields; on
``/api/events`` each also carries ``id``, ``type`` and ``time``. :data:`EVENT_TYPES`
names each type mediaflow itself publishes (the engine, the connectors, the speech
node, garbage collection, the operator API) with the fields it always carries; some
add more (named in ``extra``). A node of a user's may publish types of its own
(``ctx.more.publish``): those pass through the bus and the stream unchecked.

The registry drives the OpenAPI document (the ``Event`` schema lists the types) and
the docs (the table in ``docs/http-api.md`` is :func:`markdown_table`'s; a test keeps
them equal). A new event type is one entry here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class EventType:
    """One event type: its ``name``, who publishes it, the ``fields`` it always
    carries, what ``extra`` fields it may add, and one line on what it means."""

    name: str
    by: str
    fields: tuple[str, ...]
    doc: str
    extra: str = ""


_NODE = ("flow", "node")  # ctx.more.publish adds these (and ``item`` in a run for an item)
_ITEM = ("flow", "node", "entry_id", "seq")

_TYPES = (
    EventType("run_started", "engine", ("flow", "run_id", "resumed"), "a flow run began"),
    EventType("run_finished", "engine", ("flow", "run_id", "reason"), "a flow run ended"),
    EventType("worker_started", "engine", ("flow", "consumer"), "a worker joined a flow"),
    EventType("worker_finished", "engine", ("flow", "run_id", "reason"), "a worker left"),
    EventType("source_started", "engine", (*_NODE, "redelivery"), "a source node began"),
    EventType("source_ended", "engine", (*_NODE, "error"), "a source node returned"),
    EventType(
        "cascade_retry",
        "engine",
        (*_ITEM, "attempt", "retry_in_s", "error"),
        "a node's run for an item failed and will be retried (`away`: `store`,"
        " `queue` or the service a node named, `mqtt`, when only that being away"
        " failed it, which costs no attempt)",
        "away",
    ),
    EventType(
        "cascade_dropped",
        "engine",
        (*_ITEM, "deliveries", "attempts", "reason"),
        "an item was dead-lettered",
    ),
    EventType(
        "stale_dropped",
        "engine",
        (*_NODE, "source", "seq"),
        "an item from an earlier generation of a guarded source was dropped",
    ),
    EventType(
        "items_coalesced",
        "engine",
        (*_NODE, "skipped", "seqs"),
        "a rate-limited node skipped older waiting items (first and last seq)",
    ),
    EventType("work_latency", "engine", ("flow", "nodes"), "per-node latency summaries"),
    EventType(
        "engine_degraded",
        "engine",
        ("flow", "backlog", "per_flow", "growth_per_sample"),
        "the backlog keeps growing",
    ),
    EventType("engine_recovered", "engine", ("backlog",), "the backlog stopped growing"),
    EventType("queue_unavailable", "engine", ("loop", "error"), "the queue stopped answering"),
    EventType("queue_available", "engine", ("loop",), "the queue answers again"),
    EventType(
        "store_unavailable",
        "engine",
        (*_NODE, "store", "error"),
        "a source's save found the artifact store away: it waits and saves again",
    ),
    EventType(
        "store_available",
        "engine",
        (*_NODE, "store", "away_s"),
        "a source's save landed again after the store was away",
    ),
    EventType(
        "forward_unavailable",
        "forward",
        ("flow", "error"),
        "an edge box cannot reach the shared queue or the artifact service; it keeps"
        " capturing into its own journal",
    ),
    EventType(
        "forward_available",
        "forward",
        ("flow", "away_s"),
        "an edge box reaches the shared queue and the service again and catches up",
    ),
    EventType(
        "forward_lost",
        "forward",
        ("flow", "node", "items"),
        "items an edge box gave up unforwarded: the link stayed away longer than its"
        " store could hold them",
    ),
    EventType("flow_paused", "engine", ("flow",), "the flow was paused"),
    EventType("flow_resumed", "engine", ("flow",), "the flow was resumed"),
    EventType("flow_disabled", "engine", ("flow",), "the flow was disabled"),
    EventType("flow_enabled", "engine", ("flow",), "the flow was enabled"),
    EventType(
        "flow_stepped",
        "engine",
        (*_ITEM, "deliveries", "enqueued_at"),
        "a step of a paused flow started this item",
    ),
    EventType(
        "flow_reloaded",
        "engine",
        ("flow", "kept", "changed", "added", "removed", "dead_lettered"),
        "the flow file changed and was applied",
    ),
    EventType("reload_refused", "engine", ("flow", "error"), "a changed flow file was refused"),
    EventType(
        "latest",
        "engine",
        ("flow", "node", "port", "value", "seq"),
        "the newest value of a port, once durable"
        " (throttled, but every line of a text port; not replayed)",
        "item",
    ),
    EventType(
        "device_lost",
        "connectors",
        (*_NODE, "device", "error"),
        "a camera or microphone went away",
    ),
    EventType(
        "device_restored",
        "connectors",
        (*_NODE, "device", "attempts", "waited_s", "down_s"),
        "a lost device is back",
    ),
    EventType(
        "audio_overflow",
        "connectors",
        (*_NODE, "device", "total", "new"),
        "a microphone lost sound",
        "a count per cause",
    ),
    EventType(
        "frames_skipped",
        "connectors",
        (*_NODE, "device", "total", "new"),
        "a camera skipped frames",
        "a count per lane",
    ),
    EventType(
        "transcript",
        "speech node",
        (*_NODE, "port", "text", "start", "end", "final"),
        "recognised speech (partial or final)",
        "item, confidence",
    ),
    EventType(
        "motion",
        "motion node",
        (*_NODE, "phase", "source", "start", "end", "score"),
        "something moved in a camera's picture (`phase` start, then end)",
        "item, length, zone, snapshot",
    ),
    EventType(
        "loudness",
        "loudness node",
        (*_NODE, "phase", "source", "start", "end", "score"),
        "a microphone was louder than its threshold (`phase` start, then end)",
        "item, length",
    ),
    EventType(
        "gc_swept",
        "gc",
        ("deleted", "freed_bytes", "evicted", "stored_bytes", "over_cap"),
        "a garbage-collection sweep ended",
        "the sweep's other counts",
    ),
    EventType("gc_failed", "gc", ("error",), "a sweep failed"),
    EventType(
        "artifact_evicted", "gc", ("digest", "bytes", "why"), "a recording went (retention, cap)"
    ),
    EventType(
        "store_over_cap",
        "gc",
        ("stored_bytes", "max_bytes", "live_bytes"),
        "the store holds more than its cap and cannot evict enough",
    ),
    EventType(
        "dead_letter_requeued",
        "server",
        ("dead_letter_id", "flow", "node", "seq"),
        "an operator requeued a dead letter",
        "the item's view",
    ),
    EventType(
        "dead_letter_deleted",
        "server",
        ("dead_letter_id", "flow", "node", "seq"),
        "an operator deleted a dead letter",
    ),
    EventType(
        "events_dropped",
        "server",
        ("missed",),
        "this stream fell behind and missed events (no id)",
        "after or reason",
    ),
)

EVENT_TYPES: Mapping[str, EventType] = MappingProxyType({t.name: t for t in _TYPES})
"""Every event type mediaflow publishes, by name."""


def markdown_table() -> str:
    """The docs' table of event types (``docs/http-api.md``), one row a type."""
    rows = ["| type | by | fields | means |", "| --- | --- | --- | --- |"]
    for kind in _TYPES:
        fields = ", ".join(f"`{name}`" for name in kind.fields)
        if kind.extra:
            fields += f"; may add {kind.extra}"
        rows.append(f"| `{kind.name}` | {kind.by} | {fields} | {kind.doc} |")
    return "\n".join(rows) + "\n"
