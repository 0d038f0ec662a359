"""Declaring a flow from Python: :class:`FlowBuilder`, validated as a flow file is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediaflow.flows import registry
from mediaflow.flows.assemble import (
    ConnectorTarget,
    DeclaredNode,
    GivenTarget,
    NodeTarget,
    UseTarget,
    assemble,
)
from mediaflow.flows.spec import FlowProblem, FlowSpec
from mediaflow.flows.validate import check_retention_days
from mediaflow.node import Node


class FlowBuilder:
    """Declares a flow from Python; :meth:`build` validates it like a flow file.

    >>> spec = (FlowBuilder("desk")
    ...     .add("mic", "microphone", device="default")
    ...     .add("asr", "speech", inputs={"audio": "mic.audio"})
    ...     .build())   # doctest: +SKIP

    ``retention_days`` is ``[flow] retention_days`` (see :class:`FlowSpec`).
    """

    def __init__(self, name: str, *, retention_days: float | None = None) -> None:
        self.name = name
        self.retention_days = retention_days
        self._declared: list[DeclaredNode] = []

    def add(
        self,
        id: str,
        node: type[Node] | Node | str,
        *,
        inputs: Mapping[str, str] | None = None,
        max_rate: float | None = None,
        edge: bool = False,
        **options: Any,
    ) -> FlowBuilder:
        """Declare node ``id``; return the builder so calls chain.

        ``node`` is a Node subclass (built later with ``options`` as kwargs), a
        Node instance (used as is; no options), ``"package.module:Class"``, or
        a registered node or connector name. ``max_rate``: at most that many
        runs per second, coalescing to the newest item. ``edge``: on an edge box
        that forwards (docs/edge.md), the node runs there, beside the sources.
        Nothing is checked until :meth:`build`.
        """
        target: NodeTarget = UseTarget(node) if isinstance(node, str) else GivenTarget(node)
        # A bare name that is no node name but a connector name means the
        # connector; any other unknown name is reported by build() as a node.
        if (
            isinstance(node, str)
            and ":" not in node
            and registry.node_target(node) is None
            and registry.connector_target(node) is not None
        ):
            target = ConnectorTarget(node)
        index = len(self._declared) + 1
        declared = DeclaredNode(
            index, id, target, dict(inputs or {}), dict(options), max_rate, edge
        )
        self._declared.append(declared)
        return self

    def build(self) -> FlowSpec:
        """The validated :class:`FlowSpec`; raises :class:`FlowError` listing every problem."""
        problems: list[FlowProblem] = []
        if not isinstance(self.name, str) or not self.name.strip():
            problems.append(FlowProblem(f"flow name must be a non-empty string, got {self.name!r}"))
        retention = None
        if self.retention_days is not None:
            retention = check_retention_days(self.retention_days, "", problems)
        return assemble(
            str(self.name),
            list(self._declared),
            where=f"flow {self.name!r}",
            path=None,
            problems=problems,
            retention_days=retention,
        )
