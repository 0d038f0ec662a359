"""The flow model: a validated graph of nodes, as the engine reads it.

A :class:`FlowSpec` is only ever built by :func:`~mediaflow.flows.load_flow`,
:func:`~mediaflow.flows.flow_from_dict` or :class:`~mediaflow.flows.FlowBuilder`,
all of which validate it first: every node class is resolved, every option
binds to the class's ``__init__`` and fits its annotation, every input is wired
to an output port of the same kind, and the graph has no cycle. The engine may
therefore trust a spec it is handed and never re-check it (what a node's
constructor itself refuses is known only when the engine builds the node).

Nothing here starts, opens or instantiates anything: a node instance comes
from ``NodeSpec.factory()`` when the engine decides to build one.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediaflow.node import Node, RetryPolicy

# Node ids and port names share one shape, so "node.port" splits unambiguously
# at the dot and ids stay usable in URLs, metric labels and queue keys.
NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_-]*"
NAME_RE = re.compile(rf"^{NAME_PATTERN}$")
_REF_RE = re.compile(rf"^({NAME_PATTERN})\.({NAME_PATTERN})$")


@dataclass(frozen=True)
class PortRef:
    """One port of one node, written ``"node.port"`` in a flow file."""

    node: str
    port: str

    @classmethod
    def parse(cls, text: str) -> PortRef:
        """Parse ``"node.port"``; raise ``ValueError`` saying what is wrong with it."""
        match = _REF_RE.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a 'node.port' reference")
        return cls(match.group(1), match.group(2))

    def __str__(self) -> str:
        return f"{self.node}.{self.port}"


@dataclass(frozen=True)
class Edge:
    """A wire from a producer's output port to a consumer's input port."""

    source: PortRef
    target: PortRef


@dataclass(frozen=True)
class BoundFactory:
    """Builds a fresh node instance of ``node_class`` with ``options`` as kwargs.

    Equal factories build equal nodes, so two specs of the same flow compare
    equal whether they came from a file or from :class:`FlowBuilder`.
    """

    node_class: type[Node]
    options: Mapping[str, Any]

    def __call__(self) -> Node:
        # Deep copy: the options are parsed once but an engine may build several
        # instances (one per worker); a node that mutates a list option must
        # not change what its siblings see.
        kwargs: dict[str, Any] = copy.deepcopy(dict(self.options))
        return self.node_class(**kwargs)


@dataclass(frozen=True, eq=False)
class GivenInstance:
    """Returns the node instance a Python caller handed to :class:`FlowBuilder`.

    Every call returns the *same* object; a flow built this way runs in one
    process only (pass the class and options instead to get fresh instances).
    """

    node: Node

    def __call__(self) -> Node:
        return self.node

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GivenInstance) and other.node is self.node

    def __hash__(self) -> int:
        return id(self.node)


@dataclass(frozen=True)
class NodeSpec:
    """One validated node of a flow.

    ``inputs`` holds only the wired input ports (an optional input left
    unwired is absent); ``input_kinds``/``output_kinds`` are every declared
    port, from the class or from its ``ports(options)`` hook. A node is a
    source exactly when it declares no input ports.
    """

    id: str
    factory: Callable[[], Node]
    node_class: type[Node]
    options: Mapping[str, Any]
    inputs: Mapping[str, PortRef]
    input_kinds: Mapping[str, str]
    output_kinds: Mapping[str, str]
    is_source: bool
    max_rate: float | None = None
    """Runs per second at most (``max_rate`` in the flow file): items arriving
    faster are coalesced to the newest, which runs when the window ends."""
    edge: bool = False
    """Runs on an edge box that forwards, beside the sources, on its local journal
    (``edge = true``); every other non-source node runs where the work is
    forwarded to (:mod:`mediaflow.forward`). Meaningless without forwarding."""
    retry: RetryPolicy | None = None
    """How the engine retries the node's failed items (its class's
    :meth:`~mediaflow.node.Node.retry_policy`); None: the engine's settings."""


@dataclass(frozen=True)
class FlowSpec:
    """A validated flow: nodes in file order and the edges between them.

    ``edges`` are in file order too (consumer by consumer, input by input).
    ``path`` is the flow file, or ``None`` for a flow built in Python.
    ``retention_days`` (``[flow] retention_days``, positive) is how long a
    recording the flow keeps (``ctx.more.keep``) is spared by garbage collection;
    ``None`` keeps recordings until a disk cap evicts them.
    """

    name: str
    nodes: Mapping[str, NodeSpec]
    edges: tuple[Edge, ...]
    path: Path | None = None
    retention_days: float | None = None

    def consumers(self, node: str, port: str) -> list[PortRef]:
        """The input ports reading ``node.port`` (fan-out), in file order; may be empty."""
        source = PortRef(node, port)
        return [edge.target for edge in self.edges if edge.source == source]

    def sources(self) -> list[NodeSpec]:
        """The nodes without input ports, in file order."""
        return [spec for spec in self.nodes.values() if spec.is_source]


@dataclass(frozen=True)
class FlowProblem:
    """One thing wrong with a flow.

    ``message`` starts with its subject (``"node 'asr': ..."``, ``"[flow]: ..."``)
    but not with the file, which :class:`FlowError` adds. ``node`` is the id of
    the node at fault, when there is one.
    """

    message: str
    node: str | None = None


class FlowError(Exception):
    """A flow file or a built flow is invalid; nothing was started.

    ``str(error)`` is one line per problem, each naming the flow (its file
    path as given, or ``flow 'name'`` for a flow built in Python) and the node.
    ``path`` is the flow file or ``None``; ``node`` is the node of the first
    problem (or ``None``); ``problems`` lists them all.
    """

    def __init__(
        self, where: str, problems: Sequence[FlowProblem], *, path: Path | None = None
    ) -> None:
        if not problems:
            raise ValueError("a FlowError needs at least one problem")
        self.where = where
        self.path = path
        self.problems: tuple[FlowProblem, ...] = tuple(problems)
        self.node = self.problems[0].node
        super().__init__("\n".join(f"{where}: {p.message}" for p in self.problems))
