"""The node instances of one runner: built, set up, torn down, and replaced on a reload.

``instances`` is the mapping the executor runs from; it changes in place, so a
reload swaps an instance without the executor holding a stale one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from mediaflow.config import ConfigError
from mediaflow.engine.context import FlowEnv, RunContext
from mediaflow.flows import FlowSpec
from mediaflow.node import Node
from mediaflow.store import use_store
from mediaflow.store.current import saving_through

log = logging.getLogger("mediaflow.engine")


class NodeRefusedOptions(ConfigError):
    """A node's constructor refused the options its flow gave it (it raised
    ``ValueError`` or ``TypeError``, the error chained as the cause).

    A setting with a value mediaflow cannot use, as any :class:`ConfigError`:
    the flow file needs fixing. ``node`` is the id of the node.
    """

    def __init__(self, node: str, refusal: Exception) -> None:
        why = str(refusal) or type(refusal).__name__
        super().__init__(f"node {node!r} refused its options: {why}")
        self.node = node


class NodeSet:
    def __init__(self, env: FlowEnv) -> None:
        self._env = env
        self.instances: dict[str, Node] = {}

    async def build(self, spec: FlowSpec, node_ids: Iterable[str]) -> dict[str, Node]:
        """New instances of ``node_ids`` as ``spec`` describes them, each set up.
        If one's ``setup`` raises, those already set up are torn down and the
        error propagates: nothing is left half-built. Not installed yet.

        A constructor's ``ValueError`` or ``TypeError`` (its options' checks, which
        :func:`~mediaflow.flows.load_flow` cannot know) becomes
        :class:`NodeRefusedOptions` naming the node; ``setup``'s errors propagate as they are.
        """
        built: dict[str, Node] = {}
        try:
            for node_id in node_ids:
                try:
                    node = spec.nodes[node_id].factory()
                except (ValueError, TypeError) as exc:
                    raise NodeRefusedOptions(node_id, exc) from exc
                ctx = RunContext(self._env, node_id, {}, None)
                try:
                    with use_store(self._env.store), saving_through(ctx):
                        await node.setup(ctx)
                finally:
                    ctx.end()  # what setup saved and did not keep, it dropped
                built[node_id] = node
        except BaseException:
            await _tear_down(built.items())
            raise
        return built

    def install(self, built: dict[str, Node]) -> None:
        self.instances.update(built)

    async def retire(self, node_ids: Iterable[str]) -> None:
        """Tear down and forget these instances (a reload replaced or removed them)."""
        await _tear_down((n, self.instances.pop(n)) for n in list(node_ids) if n in self.instances)

    async def tear_down_all(self) -> None:
        await _tear_down(self.instances.items())


async def _tear_down(nodes: Iterable[tuple[str, Node]]) -> None:
    for node_id, node in nodes:
        try:
            await node.teardown()
        except Exception:
            log.exception("teardown of node %r failed", node_id)
