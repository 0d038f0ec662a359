"""Turning a flow file or a dict of the same shape into a validated :class:`FlowSpec`.

:func:`load_flow` parses TOML (stdlib ``tomllib``) and hands the data to
:func:`flow_from_dict`, which checks its shape (``[flow]``, ``[[node]]`` tables,
``use`` or ``connector``) and declares each node; :func:`~mediaflow.flows.assemble.assemble`
resolves and validates them, as it does for :class:`~mediaflow.flows.FlowBuilder`.
Every problem found is reported at once in one :class:`FlowError`; nothing is
instantiated or started.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mediaflow.flows.assemble import ConnectorTarget, DeclaredNode, NodeTarget, UseTarget, assemble
from mediaflow.flows.spec import NAME_RE, FlowError, FlowProblem, FlowSpec
from mediaflow.flows.validate import check_retention_days

FLOW_KEYS = frozenset({"name", "retention_days"})
TOP_LEVEL_KEYS = frozenset({"flow", "node"})
# Keys of a [[node]] table that are not options of the node class.
NODE_KEYS = frozenset({"id", "use", "connector", "inputs", "max_rate", "edge"})

# tomllib ends each message with "(at line L, column C)" or "(at end of document)".
_TOML_WHERE_RE = re.compile(
    r"^(?P<msg>.*) \(at (?:line (?P<line>\d+), column (?P<col>\d+)|(?P<end>end of document))\)$"
)


def load_flow(path: Path | str) -> FlowSpec:
    """Read, resolve and validate the flow file at ``path``.

    Imports the modules the flow names (see :mod:`mediaflow.flows.assemble`); starts
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
    return assemble(
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


def _declared_nodes(tables: object, problems: list[FlowProblem]) -> list[DeclaredNode]:
    if tables is None:
        return []
    if isinstance(tables, Mapping):
        # `[node]` instead of `[[node]]`: the most likely slip, so say so.
        problems.append(FlowProblem("[node]: nodes are an array of tables; write [[node]]"))
        return []
    if not isinstance(tables, list):
        problems.append(FlowProblem(f"node: must be [[node]] tables, got {type(tables).__name__}"))
        return []
    declared: list[DeclaredNode] = []
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
        max_rate = table.get("max_rate")
        edge = table.get("edge", False)
        declared.append(DeclaredNode(index, node_id, target, inputs, options, max_rate, edge))
    return declared


def _subject(index: int, node_id: object) -> str:
    if isinstance(node_id, str) and NAME_RE.match(node_id):
        return f"node {node_id!r}"
    return f"[[node]] #{index}"


def _table_target(
    table: Mapping[str, Any], subject: str, problems: list[FlowProblem]
) -> NodeTarget | None:
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
    return UseTarget(value) if key == "use" else ConnectorTarget(value)
