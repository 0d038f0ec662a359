"""From declared nodes to a validated :class:`FlowSpec`: resolve, bind, check.

A flow file (:mod:`mediaflow.flows.load`) and :class:`~mediaflow.flows.FlowBuilder`
both describe their nodes as :class:`DeclaredNode` values and end in
:func:`assemble`, which resolves each node's class (a built-in name, a connector
name, ``"package.module:Class"``, or a class or instance given in Python), binds
its options, reads its ports and validates the graph. Every problem found is
reported at once in one :class:`FlowError`; nothing is instantiated or started.

Importing a ``"package.module:Class"`` runs that module's top-level code;
the flow file's directory is put first on ``sys.path`` for the duration of
the import, so a module next to the flow file is found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, assert_never

from mediaflow.flows import registry
from mediaflow.flows.node_checks import (
    NodeProblem,
    bind_options,
    check_option_types,
    class_name,
    declared_ports,
    optional_inputs,
    retry_policy,
)
from mediaflow.flows.spec import (
    BoundFactory,
    Edge,
    FlowError,
    FlowProblem,
    FlowSpec,
    GivenInstance,
    NodeSpec,
    PortRef,
)
from mediaflow.flows.validate import (
    check_edge,
    check_graph,
    check_id,
    check_max_rate,
    check_node_inputs,
    open_input_kinds,
)
from mediaflow.node import Node


@dataclass(frozen=True)
class UseTarget:
    """``use = "..."``: a registered node name or ``"package.module:Class"``."""

    name: str


@dataclass(frozen=True)
class ConnectorTarget:
    """``connector = "..."``: a registered connector name."""

    name: str


@dataclass(frozen=True)
class GivenTarget:
    """A node class or instance handed to :class:`~mediaflow.flows.FlowBuilder`."""

    node: object


NodeTarget = UseTarget | ConnectorTarget | GivenTarget


@dataclass(frozen=True)
class DeclaredNode:
    """One node as declared, before any check beyond its table's shape."""

    index: int  # 1-based position, to name a node whose id is unusable
    id: object
    target: NodeTarget
    inputs: object
    options: Mapping[str, Any]
    max_rate: object = None
    edge: object = False


def assemble(
    name: str,
    declared: list[DeclaredNode],
    *,
    where: str,
    path: Path | None,
    problems: list[FlowProblem],
    retention_days: float | None = None,
) -> FlowSpec:
    """Resolve and validate every declared node, then the graph.

    ``where`` names the flow in the error (its file, or ``flow 'name'``); ``path``
    is the flow file, whose directory node modules are imported from. Raises
    :class:`FlowError` listing ``problems`` (found by the caller) and every
    problem found here; imports node modules but instantiates nothing.
    """
    search_dir = path.resolve().parent if path is not None else None
    if not declared and not problems:
        problems.append(FlowProblem("the flow has no nodes; add a [[node]] table"))
    node_ids: list[str] = []
    first_index: dict[str, int] = {}
    nodes: dict[str, NodeSpec] = {}
    for decl in declared:
        node_id = check_id(decl.id, decl.index, first_index, problems)
        if node_id is None:
            continue
        node_ids.append(node_id)
        try:
            nodes[node_id] = _node_spec(node_id, decl, search_dir)
        except _NodeProblems as exc:
            problems.extend(FlowProblem(f"node {node_id!r}: {m}", node_id) for m in exc.messages)
    nodes = _with_open_input_kinds(nodes)
    problems.extend(check_graph(node_ids, nodes))
    if problems:
        raise FlowError(where, problems, path=path)
    edges = tuple(
        Edge(source=ref, target=PortRef(spec.id, port))
        for spec in nodes.values()
        for port, ref in spec.inputs.items()
    )
    return FlowSpec(
        name=name,
        nodes=MappingProxyType(nodes),
        edges=edges,
        path=path,
        retention_days=retention_days,
    )


def _with_open_input_kinds(nodes: dict[str, NodeSpec]) -> dict[str, NodeSpec]:
    """``nodes`` with the kinds of the inputs a node takes openly filled in from
    their producers (:attr:`~mediaflow.node.Node.open_inputs`)."""
    resolved = dict(nodes)
    for node_id, spec in nodes.items():
        if spec.node_class.open_inputs:
            kinds = open_input_kinds(spec, nodes)
            if kinds is not None:
                resolved[node_id] = replace(spec, input_kinds=MappingProxyType(kinds))
    return resolved


class _NodeProblems(Exception):
    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


def _node_spec(node_id: str, decl: DeclaredNode, search_dir: Path | None) -> NodeSpec:
    """Resolve one node and run its node-level checks; raise ``_NodeProblems``."""
    try:
        node_class, instance = _resolve(decl.target, search_dir)
        if instance is not None and decl.options:
            raise NodeProblem("options cannot be given with a node instance; pass its class")
        if instance is None:
            bind_options(node_class, decl.options)
            check_option_types(node_class, decl.options)
        input_kinds, output_kinds = declared_ports(node_class, decl.options, instance)
        retry = retry_policy(node_class, decl.options)
        optional = optional_inputs(node_class, input_kinds)
        wired = _wired_inputs(decl.inputs)
    except NodeProblem as exc:
        raise _NodeProblems(list(exc.messages)) from exc
    open_inputs = node_class.open_inputs
    refs, messages = check_node_inputs(wired, input_kinds, optional, open_inputs=open_inputs)
    is_source = not input_kinds and not open_inputs
    max_rate = check_max_rate(decl.max_rate, is_source=is_source, problems=messages)
    edge = check_edge(decl.edge, is_source=is_source, problems=messages)
    if messages:
        raise _NodeProblems(messages)
    options = MappingProxyType(dict(decl.options))
    factory = GivenInstance(instance) if instance is not None else BoundFactory(node_class, options)
    return NodeSpec(
        id=node_id,
        factory=factory,
        node_class=node_class,
        options=options,
        inputs=MappingProxyType(refs),
        input_kinds=MappingProxyType(input_kinds),
        output_kinds=MappingProxyType(output_kinds),
        is_source=is_source,
        max_rate=max_rate,
        edge=edge,
        retry=retry,
    )


def _wired_inputs(raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise NodeProblem(f"'inputs' must be a table like {{ port = \"node.port\" }}, got {raw!r}")
    for port, text in raw.items():
        if not isinstance(text, str):
            raise NodeProblem(f'input {port!r}: {text!r} is not a "node.port" string')
    return {str(port): text for port, text in raw.items()}


def _resolve(target: NodeTarget, search_dir: Path | None) -> tuple[type[Node], Node | None]:
    """The node class a target names (and the instance, if one was given)."""
    match target:
        case UseTarget(name) if ":" in name:
            what = repr(name)
            obj = _import(name, search_dir, f"cannot import {what}")
        case UseTarget(name):
            import_string = registry.node_target(name)
            if import_string is None:
                raise NodeProblem(
                    f"unknown node {name!r} (built-in and registered: "
                    f"{', '.join(registry.node_names())}); "
                    'for your own class write use = "package.module:Class"'
                )
            what = _registered_what(name, import_string)
            obj = _import(import_string, None, f"{what} is not available in this installation")
        case ConnectorTarget(name):
            import_string = registry.connector_target(name)
            if import_string is None:
                raise NodeProblem(
                    f"unknown connector {name!r} (known: {', '.join(registry.connector_names())})"
                )
            what = _registered_what(name, import_string)
            obj = _import(import_string, None, f"{what} is not available in this installation")
        case GivenTarget(node):
            if isinstance(node, Node):
                return type(node), node
            what = class_name(node) if isinstance(node, type) else repr(node)
            obj = node
        case _:
            assert_never(target)
    if not (isinstance(obj, type) and issubclass(obj, Node)):
        shown = class_name(obj) if isinstance(obj, type) else type(obj).__name__
        raise NodeProblem(f"{what} is not a Node subclass (it is {shown})")
    return obj, None


def _registered_what(name: str, import_string: str) -> str:
    if registry.is_builtin(name):
        return f"built-in {name!r}"
    return f"{name!r} ({import_string})"


def _import(import_string: str, search_dir: Path | None, failure: str) -> object:
    try:
        return registry.import_target(import_string, search_dir)
    except registry.TargetImportError as exc:
        raise NodeProblem(f"{failure}: {exc}") from exc
