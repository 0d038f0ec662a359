"""Checks a node must pass on its own, before any wiring is looked at.

They need only the node's class and options: the class declares ports of known
kinds (or its ``ports`` hook answers them), its retry policy hook answers one, its
optional inputs are inputs, and the options bind to ``__init__`` and fit its
annotations. Each raises :class:`NodeProblem`, which the flow's assembly turns into
a problem naming the node (:mod:`.assemble`); the graph's checks are in
:mod:`.validate`.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Mapping
from typing import Any

from mediaflow.flows.option_types import option_misfits
from mediaflow.flows.spec import NAME_RE
from mediaflow.media import KINDS
from mediaflow.node import Node, RetryPolicy


class NodeProblem(Exception):
    """A node failed a node-level check: one or more messages, with no subject yet."""

    def __init__(self, *messages: str) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


def class_name(node_class: type) -> str:
    """How a class reads in a message: its import string."""
    return f"{node_class.__module__}:{node_class.__qualname__}"


def _checked_kinds(node_class: type, direction: str, ports: object) -> dict[str, str]:
    if not isinstance(ports, Mapping):
        raise NodeProblem(
            f"{class_name(node_class)} declares {direction}s as {type(ports).__name__}, "
            "not a mapping of port name to kind"
        )
    kinds: dict[str, str] = {}
    for port, kind in ports.items():
        if not isinstance(port, str) or NAME_RE.match(port) is None:
            raise NodeProblem(
                f"{class_name(node_class)} declares {direction} port {port!r}, "
                "which is not a valid port name"
            )
        if kind not in KINDS:
            raise NodeProblem(
                f"{class_name(node_class)} declares {direction} {port!r} with unknown kind "
                f"{kind!r} (kinds: {', '.join(sorted(KINDS))})"
            )
        kinds[port] = kind
    return kinds


def declared_ports(
    node_class: type[Node], options: Mapping[str, Any], instance: Node | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """The (inputs, outputs) port->kind maps of one node.

    An instance's own ``inputs``/``outputs`` win; otherwise the class's
    :meth:`~mediaflow.node.Node.ports` hook answers (the class attributes
    unless a connector's ports depend on its options). Raises
    :class:`NodeProblem` for an unknown kind or a failing hook.
    """
    raw_inputs: object
    raw_outputs: object
    if instance is not None:
        raw_inputs, raw_outputs = instance.inputs, instance.outputs
    elif _fixed_ports(node_class):
        raw_inputs, raw_outputs = node_class.inputs, node_class.outputs
    else:
        try:
            result: object = node_class.ports(dict(options))
        except Exception as exc:
            # A hook that cannot tell its ports (say, the file does not exist)
            # is a problem with the flow, reported like any other.
            raise NodeProblem(
                f"{class_name(node_class)}.ports() failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(result, tuple) and len(result) == 2):
            raise NodeProblem(
                f"{class_name(node_class)}.ports() must return (inputs, outputs), "
                f"got {type(result).__name__}"
            )
        raw_inputs, raw_outputs = result
    inputs = _checked_kinds(node_class, "input", raw_inputs)
    outputs = _checked_kinds(node_class, "output", raw_outputs)
    return inputs, outputs


def retry_policy(node_class: type[Node], options: Mapping[str, Any]) -> RetryPolicy | None:
    """The class's :meth:`~mediaflow.node.Node.retry_policy` for ``options``.
    Raises :class:`NodeProblem` for a hook that fails or answers something else."""
    try:
        policy: object = node_class.retry_policy(dict(options))
    except Exception as exc:
        raise NodeProblem(f"{exc}") from exc
    if policy is not None and not isinstance(policy, RetryPolicy):
        raise NodeProblem(
            f"{class_name(node_class)}.retry_policy() must return a RetryPolicy or None, "
            f"got {type(policy).__name__}"
        )
    return policy


def _fixed_ports(node_class: type[Node]) -> bool:
    """Whether the class's ports are its class attributes (``ports`` not overridden)."""
    return inspect.getattr_static(node_class, "ports") is Node.__dict__["ports"]


def optional_inputs(node_class: type[Node], input_kinds: Mapping[str, str]) -> frozenset[str]:
    """The inputs that may stay unwired: those the class lists in ``optional_inputs``.

    Every other declared input is required. Raises :class:`NodeProblem` if the
    attribute is not a collection of port names, or (for a class without a
    ``ports`` hook, whose inputs are fixed) names a port it does not declare.
    """
    declared: object = node_class.optional_inputs
    if isinstance(declared, str) or not isinstance(declared, Collection):
        raise NodeProblem(
            f"{class_name(node_class)}.optional_inputs must be a set of port names, "
            f"got {declared!r}"
        )
    names = frozenset(str(name) for name in declared)
    unknown = sorted(names - set(input_kinds))
    if unknown and _fixed_ports(node_class):
        raise NodeProblem(
            f"{class_name(node_class)}.optional_inputs names {', '.join(map(repr, unknown))}, "
            f"which is not one of its inputs ({listing(input_kinds)})"
        )
    return names


def bind_options(node_class: type[Node], options: Mapping[str, Any]) -> None:
    """Check that ``node_class(**options)`` would bind, without calling it.

    Raises :class:`NodeProblem` naming unknown options (and what the class
    takes) or missing required ones; :func:`check_option_types` checks their values.
    """
    try:
        signature = inspect.signature(node_class)
    except (TypeError, ValueError) as exc:
        raise NodeProblem(f"cannot read the options {class_name(node_class)} takes: {exc}") from exc
    params = signature.parameters.values()
    keyword_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    takes = [p.name for p in params if p.kind in keyword_kinds]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    unknown = [] if takes_any else [name for name in options if name not in takes]
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise NodeProblem(
            f"unknown option{plural} {', '.join(map(repr, unknown))} for "
            f"{class_name(node_class)} (it takes: {listing(takes)})"
        )
    missing = [
        p.name
        for p in params
        if p.kind in keyword_kinds
        and p.default is inspect.Parameter.empty
        and p.name not in options
    ]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        raise NodeProblem(
            f"missing required option{plural} {', '.join(map(repr, missing))} for "
            f"{class_name(node_class)}"
        )
    try:
        signature.bind(**options)
    except TypeError as exc:
        # What is left: positional-only parameters, which a flow file cannot fill.
        raise NodeProblem(
            f"options do not fit {class_name(node_class)}{signature}: {exc}"
        ) from None


def check_option_types(node_class: type[Node], options: Mapping[str, Any]) -> None:
    """Check each option's value against its ``__init__`` annotation (options that
    bind: :func:`bind_options` first). Raises :class:`NodeProblem` with one message
    per option that does not fit (:func:`~mediaflow.flows.option_types.option_misfits`).
    """
    misfits = option_misfits(node_class, options)
    if misfits:
        raise NodeProblem(*misfits)


def listing(names: Collection[str]) -> str:
    return ", ".join(names) if names else "none"
