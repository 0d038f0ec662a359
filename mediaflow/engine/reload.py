"""What reloading a flow file changes (a pure comparison of two specs), and the
retiring of removed nodes' queued work.

A reload (``mediaflow run`` on SIGHUP, or ``--watch``) keeps every node whose
class, options and wiring are unchanged, running; rebuilds the changed ones;
builds the added ones; and retires the removed ones, whose queued items are
dead-lettered with the reason, never dropped. :meth:`RunLife.reshape
<mediaflow.engine.lifecycle.RunLife.reshape>` performs the plan in the
runner, :func:`retire_streams` in the queue.
"""

from __future__ import annotations

from dataclasses import dataclass

from mediaflow.engine.queue_roles import EngineQueue
from mediaflow.flows import FlowSpec
from mediaflow.flows.spec import NodeSpec
from mediaflow.queue.contract import StreamKey


class ReloadRefused(ValueError):
    """The new flow file cannot replace the running flow (its name differs)."""


@dataclass(frozen=True)
class ReloadPlan:
    """Node ids by fate, each in the new (``removed``: the old) file's order."""

    kept: tuple[str, ...]
    changed: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    old: FlowSpec
    new: FlowSpec

    @property
    def rebuilt(self) -> tuple[str, ...]:
        """Nodes whose new instance must be built and set up."""
        return (*self.changed, *self.added)

    @property
    def retired(self) -> tuple[str, ...]:
        """Nodes whose old instance is torn down."""
        return (*self.changed, *self.removed)

    @property
    def halted_sources(self) -> tuple[str, ...]:
        """Running sources that must end: changed ones (they restart) and removed ones."""
        return tuple(n for n in self.retired if self.old.nodes[n].is_source)

    @property
    def is_noop(self) -> bool:
        return not (self.changed or self.added or self.removed)

    def to_json(self) -> dict[str, list[str]]:
        return {
            "kept": list(self.kept),
            "changed": list(self.changed),
            "added": list(self.added),
            "removed": list(self.removed),
        }


def plan_reload(old: FlowSpec, new: FlowSpec) -> ReloadPlan:
    """Compare ``old`` and ``new``. Raises :class:`ReloadRefused` if the flow's
    name changed (that is another flow: stop this one and run that)."""
    if old.name != new.name:
        raise ReloadRefused(
            f"the flow file now names flow {new.name!r}, not {old.name!r}: "
            "a reload keeps the flow's name (stop this run and start the other flow)"
        )
    kept, changed, added = [], [], []
    for node_id, spec in new.nodes.items():
        before = old.nodes.get(node_id)
        if before is None:
            added.append(node_id)
        elif _same(before, spec):
            kept.append(node_id)
        else:
            changed.append(node_id)
    removed = [node_id for node_id in old.nodes if node_id not in new.nodes]
    return ReloadPlan(tuple(kept), tuple(changed), tuple(added), tuple(removed), old, new)


def _same(old: NodeSpec, new: NodeSpec) -> bool:
    return (
        old.node_class is new.node_class
        and dict(old.options) == dict(new.options)
        and dict(old.inputs) == dict(new.inputs)
        and old.is_source == new.is_source
        and old.max_rate == new.max_rate
    )


async def retire_streams(
    queue: EngineQueue, flow: str, nodes: tuple[str, ...], *, paused: bool, sweeper: str
) -> int:
    """Dead-letter what waits for ``nodes``, which a reload removed, with that
    reason (a removed source's own item is simply finished); return how many
    were dead-lettered. ``paused``: the flow is parked, and is unparked for the
    sweep only (a parked flow's items are not handed out). ``sweeper``: the
    consumer name the sweep claims under."""
    if not nodes:
        return 0
    wants = {StreamKey(flow, node): 1000 for node in nodes}
    dead = 0
    if paused:
        await queue.unpark(flow)
    try:
        while items := await queue.claim(sweeper, wants):
            sources = [item.entry_id for item in items if item.kind == "source"]
            if sources:
                await queue.ack(sources)
            for item in items:
                if item.kind != "source":
                    reason = f"node {item.stream.node!r} was removed from flow {flow!r} by a reload"
                    await queue.dead_letter(item, reason)
                    dead += 1
    finally:
        if paused:
            await queue.park(flow)
    return dead
