"""Turning a flow file, a dict or Python calls into a validated :class:`FlowSpec`.

Three entry points share one path: :func:`load_flow` parses TOML (stdlib
``tomllib``) and hands the data to :func:`flow_from_dict`, which checks its
shape; :class:`FlowBuilder` declares the same nodes from Python. All of them
end in ``_assemble``, which resolves each node's class (a built-in name, a
connector name, ``"package.module:Class"``, or a class or instance given in
Python), binds its options, reads its ports and validates the graph. Every
problem found is reported at once in one :class:`FlowError`; nothing is
instantiated or started.

Importing a ``"package.module:Class"`` runs that module's top-level code;
the flow file's directory is put first on ``sys.path`` for the duration of
the import, so a module next to the flow file is found.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, assert_never

from mediaflow.flows import registry
from mediaflow.flows.spec import (
    NAME_RE,
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
    NodeProblem,
    bind_options,
    check_graph,
    check_id,
    check_node_inputs,
    check_retention_days,
    class_name,
    declared_ports,
    optional_inputs,
)
from mediaflow.node import Node

FLOW_KEYS = frozenset({"name", "retention_days"})
TOP_LEVEL_KEYS = frozenset({"flow", "node"})
# Keys of a [[node]] table that are not options of the node class.
NODE_KEYS = frozenset({"id", "use", "connector", "inputs"})

# tomllib ends each message with "(at line L, column C)" or "(at end of document)".
_TOML_WHERE_RE = re.compile(
    r"^(?P<msg>.*) \(at (?:line (?P<line>\d+), column (?P<col>\d+)|(?P<end>end of document))\)$"
)


@dataclass(frozen=True)
class _Use:
    """``use = "..."``: a registered node name or ``"package.module:Class"``."""

    name: str


@dataclass(frozen=True)
class _Connector:
    """``connector = "..."``: a registered connector name."""

    name: str


@dataclass(frozen=True)
class _Given:
    """A node class or instance handed to :class:`FlowBuilder`."""

    node: object


_Target = _Use | _Connector | _Given


@dataclass(frozen=True)
class _Declared:
    """One node as declared, before any check beyond its table's shape."""

    index: int  # 1-based position, to name a node whose id is unusable
    id: object
    target: _Target
    inputs: object
    options: Mapping[str, Any]


def load_flow(path: Path | str) -> FlowSpec:
    """Read, resolve and validate the flow file at ``path``.

    Imports the modules the flow names (see the module docstring); starts
    nothing. Raises :class:`FlowError` for an unreadable file, a TOML syntax
    error (with line and column) or any invalid flow, every problem at once.
    """
    path = Path(path)
    where = str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        problem = FlowProblem(f"cannot read the flow file: {exc.strerror or exc}")
        raise FlowError(where, [problem], path=path) from exc
    except UnicodeDecodeError as exc:
        problem = FlowProblem(f"not UTF-8 text (byte {exc.start}); TOML files are UTF-8")
        raise FlowError(where, [problem], path=path) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FlowError(where, [FlowProblem(_toml_message(exc))], path=path) from None
    return flow_from_dict(data, path=path)


def _toml_message(exc: tomllib.TOMLDecodeError) -> str:
    match = _TOML_WHERE_RE.match(str(exc))
    if match is None:
        return f"invalid TOML: {exc}"
    if match.group("end"):
        return f"at end of file: invalid TOML: {match.group('msg')}"
    line, column, message = match.group("line"), match.group("col"), match.group("msg")
    return f"line {line}, column {column}: invalid TOML: {message}"


def flow_from_dict(
    data: Mapping[str, Any], *, path: Path | None = None, name: str | None = None
) -> FlowSpec:
    """Validate flow data shaped like a parsed flow file (``flow`` and ``node`` keys).

    The flow's name is ``[flow] name``, else ``name``, else the stem of
    ``path``; ``[flow] retention_days``, if given, must be a positive number.
    ``path`` (the flow file, if any) names the flow in messages and
    puts its directory on ``sys.path`` while node modules are imported.
    Raises :class:`FlowError` as :func:`load_flow` does.
    """
    problems: list[FlowProblem] = []
    if not isinstance(data, Mapping):
        problems.append(FlowProblem(f"a flow is a table, got {type(data).__name__}"))
        data = {}
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            problems.append(
                FlowProblem(f"unknown top-level key {key!r} (expected: [flow] and [[node]] tables)")
            )
    table = data.get("flow", {})
    flow_name = _flow_name(table, name, path, problems)
    retention = None
    if isinstance(table, Mapping) and "retention_days" in table:
        retention = check_retention_days(table["retention_days"], "[flow]: ", problems)
    declared = _declared_nodes(data.get("node"), problems)
    where = str(path) if path is not None else f"flow {flow_name!r}"
    return _assemble(
        flow_name,
        declared,
        where=where,
        path=path,
        problems=problems,
        retention_days=retention,
    )


def _flow_name(
    table: object, default: str | None, path: Path | None, problems: list[FlowProblem]
) -> str:
    fallback = default if default is not None else (path.stem if path is not None else "flow")
    if not isinstance(table, Mapping):
        problems.append(FlowProblem(f"[flow]: must be a table, got {type(table).__name__}"))
        return fallback
    for key in table:
        if key not in FLOW_KEYS:
            problems.append(
                FlowProblem(
                    f"[flow]: unknown key {key!r} (expected: {', '.join(sorted(FLOW_KEYS))})"
                )
            )
    value = table.get("name", fallback)
    if not isinstance(value, str) or not value.strip():
        problems.append(FlowProblem(f"[flow]: name must be a non-empty string, got {value!r}"))
        return fallback
    return value


def _declared_nodes(tables: object, problems: list[FlowProblem]) -> list[_Declared]:
    if tables is None:
        return []
    if isinstance(tables, Mapping):
        # `[node]` instead of `[[node]]`: the most likely slip, so say so.
        problems.append(FlowProblem("[node]: nodes are an array of tables; write [[node]]"))
        return []
    if not isinstance(tables, list):
        problems.append(FlowProblem(f"node: must be [[node]] tables, got {type(tables).__name__}"))
        return []
    declared: list[_Declared] = []
    for index, table in enumerate(tables, start=1):
        if not isinstance(table, Mapping):
            problems.append(FlowProblem(f"[[node]] #{index}: must be a table, got {table!r}"))
            continue
        subject = _subject(index, table.get("id"))
        target = _table_target(table, subject, problems)
        if target is None:
            continue
        options = {key: value for key, value in table.items() if key not in NODE_KEYS}
        node_id = table.get("id")
        inputs = table.get("inputs", {})
        declared.append(_Declared(index, node_id, target, inputs, options))
    return declared


def _subject(index: int, node_id: object) -> str:
    if isinstance(node_id, str) and NAME_RE.match(node_id):
        return f"node {node_id!r}"
    return f"[[node]] #{index}"


def _table_target(
    table: Mapping[str, Any], subject: str, problems: list[FlowProblem]
) -> _Target | None:
    node = table.get("id") if isinstance(table.get("id"), str) else None
    use, connector = table.get("use"), table.get("connector")
    if use is not None and connector is not None:
        problems.append(FlowProblem(f"{subject}: has both 'use' and 'connector'; pick one", node))
        return None
    if use is None and connector is None:
        problems.append(
            FlowProblem(
                f"{subject}: needs 'use' (a built-in node or \"package.module:Class\") "
                "or 'connector' (camera, microphone, file, url)",
                node,
            )
        )
        return None
    key, value = ("use", use) if use is not None else ("connector", connector)
    if not isinstance(value, str) or not value:
        problems.append(FlowProblem(f"{subject}: '{key}' must be a non-empty string", node))
        return None
    return _Use(value) if key == "use" else _Connector(value)


def _assemble(
    name: str,
    declared: list[_Declared],
    *,
    where: str,
    path: Path | None,
    problems: list[FlowProblem],
    retention_days: float | None = None,
) -> FlowSpec:
    """Resolve and validate every declared node, then the graph; raise if anything failed."""
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


class _NodeProblems(Exception):
    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


def _node_spec(node_id: str, decl: _Declared, search_dir: Path | None) -> NodeSpec:
    """Resolve one node and run its node-level checks; raise ``_NodeProblems``."""
    try:
        node_class, instance = _resolve(decl.target, search_dir)
        if instance is not None and decl.options:
            raise NodeProblem("options cannot be given with a node instance; pass its class")
        if instance is None:
            bind_options(node_class, decl.options)
        input_kinds, output_kinds = declared_ports(node_class, decl.options, instance)
        optional = optional_inputs(node_class, input_kinds)
        wired = _wired_inputs(decl.inputs)
    except NodeProblem as exc:
        raise _NodeProblems([str(exc)]) from exc
    refs, messages = check_node_inputs(wired, input_kinds, optional)
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
        is_source=not input_kinds,
    )


def _wired_inputs(raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise NodeProblem(f"'inputs' must be a table like {{ port = \"node.port\" }}, got {raw!r}")
    for port, text in raw.items():
        if not isinstance(text, str):
            raise NodeProblem(f'input {port!r}: {text!r} is not a "node.port" string')
    return {str(port): text for port, text in raw.items()}


def _resolve(target: _Target, search_dir: Path | None) -> tuple[type[Node], Node | None]:
    """The node class a target names (and the instance, if one was given)."""
    match target:
        case _Use(name) if ":" in name:
            what = repr(name)
            obj = _import(name, search_dir, f"cannot import {what}")
        case _Use(name):
            import_string = registry.node_target(name)
            if import_string is None:
                raise NodeProblem(
                    f"unknown node {name!r} (built-in and registered: "
                    f"{', '.join(registry.node_names())}); "
                    'for your own class write use = "package.module:Class"'
                )
            what = _registered_what(name, import_string)
            obj = _import(import_string, None, f"{what} is not available in this installation")
        case _Connector(name):
            import_string = registry.connector_target(name)
            if import_string is None:
                raise NodeProblem(
                    f"unknown connector {name!r} (known: {', '.join(registry.connector_names())})"
                )
            what = _registered_what(name, import_string)
            obj = _import(import_string, None, f"{what} is not available in this installation")
        case _Given(node):
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
        self._declared: list[_Declared] = []

    def add(
        self,
        id: str,
        node: type[Node] | Node | str,
        *,
        inputs: Mapping[str, str] | None = None,
        **options: Any,
    ) -> FlowBuilder:
        """Declare node ``id``; return the builder so calls chain.

        ``node`` is a Node subclass (built later with ``options`` as kwargs), a
        Node instance (used as is; no options), ``"package.module:Class"``, or
        a registered node or connector name. Nothing is checked until
        :meth:`build`.
        """
        target: _Target = _Use(node) if isinstance(node, str) else _Given(node)
        # A bare name that is no node name but a connector name means the
        # connector; any other unknown name is reported by build() as a node.
        if (
            isinstance(node, str)
            and ":" not in node
            and registry.node_target(node) is None
            and registry.connector_target(node) is not None
        ):
            target = _Connector(node)
        index = len(self._declared) + 1
        declared = _Declared(index, id, target, dict(inputs or {}), dict(options))
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
        return _assemble(
            str(self.name),
            list(self._declared),
            where=f"flow {self.name!r}",
            path=None,
            problems=problems,
            retention_days=retention,
        )
