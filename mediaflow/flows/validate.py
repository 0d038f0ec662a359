"""Checks a flow must pass before anything starts.

The checks of one node's class and options are in :mod:`.node_checks`. These need
the node's wiring or every node: every wired input exists and every required one
is wired; each wire reads an existing output of a compatible kind, no node reads
itself, and there is no cycle; :func:`check_graph` returns every problem it finds,
one per wire or cycle, so a user fixes a flow in one pass instead of one error per
run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

from mediaflow.flows.node_checks import listing
from mediaflow.flows.spec import NAME_RE, FlowProblem, NodeSpec, PortRef

# Ports that carry plain JSON values; a ``json`` input reads any of them, since
# a number or a string is a JSON value (references are not: they are media).
_PLAIN_KINDS = frozenset({"text", "number", "json"})


def can_read(input_kind: str, output_kind: str) -> bool:
    """True when an input port of ``input_kind`` may be wired to an output of ``output_kind``."""
    return input_kind == output_kind or (input_kind == "json" and output_kind in _PLAIN_KINDS)


def check_retention_days(value: object, subject: str, problems: list[FlowProblem]) -> float | None:
    """``retention_days`` as a float, or None after recording why it is refused
    (anything but a finite number above 0)."""
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    ):
        return float(value)
    problems.append(
        FlowProblem(
            f"{subject}retention_days must be a positive number of days "
            f"(how long kept recordings stay), got {value!r}"
        )
    )
    return None


def check_id(
    node_id: object, index: int, first_index: dict[str, int], problems: list[FlowProblem]
) -> str | None:
    """``node_id`` if it is a usable, unused id (recording it in ``first_index``).

    Otherwise append the problem (missing, malformed or duplicate) and return
    ``None``; ``index`` is the node's 1-based position, to name it by.
    """
    if node_id is None:
        problems.append(FlowProblem(f"[[node]] #{index}: missing 'id'"))
        return None
    if not isinstance(node_id, str) or NAME_RE.match(node_id) is None:
        problems.append(
            FlowProblem(
                f"[[node]] #{index}: id {node_id!r} is not a valid id "
                "(letters, digits, '_' and '-', not starting with a digit or '-')"
            )
        )
        return None
    if node_id in first_index:
        problems.append(
            FlowProblem(
                f"node {node_id!r}: duplicate id (first used by [[node]] #{first_index[node_id]})",
                node_id,
            )
        )
        return None
    first_index[node_id] = index
    return node_id


def check_node_inputs(
    wired: Mapping[str, str],
    input_kinds: Mapping[str, str],
    optional: frozenset[str],
    *,
    open_inputs: bool = False,
) -> tuple[dict[str, PortRef], list[str]]:
    """Parse a node's ``inputs`` table against its declared input ports.

    Returns the parsed wires and a list of messages (no subject) for inputs the
    node does not declare (unless it takes ``open_inputs``: any port name, see
    :attr:`~mediaflow.node.Node.open_inputs`), malformed references, required
    inputs left unwired, and a node with inputs of which none is wired (it would
    never run).
    """
    refs: dict[str, PortRef] = {}
    problems: list[str] = []
    for port, text in wired.items():
        if port not in input_kinds and not open_inputs:
            problems.append(f"has no input port {port!r} (it has: {listing(input_kinds)})")
            continue
        if NAME_RE.match(port) is None:
            problems.append(f"input {port!r} is not a valid port name")
            continue
        try:
            refs[port] = PortRef.parse(text)
        except ValueError as exc:
            problems.append(f'input {port!r}: {exc}; write it as "node.port"')
    for port in input_kinds:
        if port not in wired and port not in optional:
            problems.append(f"input {port!r} is required but not wired")
    if input_kinds and not wired and not problems:
        problems.append(
            f"none of its inputs ({listing(input_kinds)}) is wired, so it would never run"
        )
    elif open_inputs and not wired and not problems:
        problems.append("it takes whatever is wired into it, and nothing is: it would never run")
    return refs, problems


def open_input_kinds(consumer: NodeSpec, nodes: Mapping[str, NodeSpec]) -> dict[str, str] | None:
    """A node that takes ``open_inputs``: its input kinds with each wired port it does
    not declare taking the kind of the output wired to it. None when it has none
    such; a port wired to a node or port that does not exist is left out (the
    graph's check reports the wire)."""
    undeclared = [port for port in consumer.inputs if port not in consumer.input_kinds]
    if not undeclared:
        return None
    kinds = dict(consumer.input_kinds)
    for port in undeclared:
        ref = consumer.inputs[port]
        producer = nodes.get(ref.node)
        if producer is not None and ref.port in producer.output_kinds:
            kinds[port] = producer.output_kinds[ref.port]
    return kinds


def check_graph(node_ids: Sequence[str], nodes: Mapping[str, NodeSpec]) -> list[FlowProblem]:
    """Every wiring problem between nodes, in file order, then every cycle.

    ``node_ids`` are all ids declared (in file order), including nodes that
    failed their own checks and are missing from ``nodes``: a wire to such a
    node is not reported again, since its ports are unknown.
    """
    problems: list[FlowProblem] = []
    for spec in nodes.values():
        for port, ref in spec.inputs.items():
            message = _check_wire(spec, port, ref, node_ids, nodes)
            if message is not None:
                problems.append(FlowProblem(f"node {spec.id!r}: {message}", spec.id))
    problems.extend(_check_live_audio(nodes))
    for cycle in find_cycles(node_ids, nodes):
        path = " -> ".join(cycle)
        problems.append(
            FlowProblem(
                f"node {cycle[0]!r}: cycle {path}; a flow must not loop back on itself",
                cycle[0],
            )
        )
    return problems


def _check_live_audio(nodes: Mapping[str, NodeSpec]) -> Iterator[FlowProblem]:
    """A camera's ``live_audio`` names a node of this flow with an ``audio`` output."""
    with_sound = sorted(n for n, spec in nodes.items() if spec.output_kinds.get("audio") == "audio")
    for spec in nodes.values():
        source = spec.options.get("live_audio")
        if source is not None and str(source) not in with_sound:
            message = (
                f"live_audio = {source!r} is not a node with an 'audio' output "
                f"(those with sound: {', '.join(with_sound) or 'none'})"
            )
            yield FlowProblem(f"node {spec.id!r}: {message}", spec.id)


def _check_wire(
    consumer: NodeSpec,
    port: str,
    ref: PortRef,
    node_ids: Sequence[str],
    nodes: Mapping[str, NodeSpec],
) -> str | None:
    wire = f"input {port!r} is wired to {str(ref)!r}"
    if ref.node not in node_ids:
        return f"{wire}, but there is no node {ref.node!r} (nodes: {listing(node_ids)})"
    if ref.node == consumer.id:
        return f"{wire}, its own node; a node cannot read itself"
    producer = nodes.get(ref.node)
    if producer is None:
        return None  # the producer's own problem is reported already
    if ref.port not in producer.output_kinds:
        return (
            f"{wire}, but node {ref.node!r} has no output port {ref.port!r} "
            f"(it has: {listing(producer.output_kinds)})"
        )
    input_kind = consumer.input_kinds[port]
    output_kind = producer.output_kinds[ref.port]
    if not can_read(input_kind, output_kind):
        return f"input {port!r} ({input_kind}) cannot read {str(ref)!r} ({output_kind})"
    return None


def find_cycles(node_ids: Sequence[str], nodes: Mapping[str, NodeSpec]) -> list[list[str]]:
    """Cycles among wires (self-reads excluded), each as ``[a, b, ..., a]``.

    A depth-first search in file order; every back edge closes one cycle, so
    each is reported once. Iterative, so a long chain cannot hit the
    recursion limit.
    """
    readers: dict[str, list[str]] = {node_id: [] for node_id in node_ids}
    for spec in nodes.values():
        for ref in spec.inputs.values():
            if ref.node != spec.id and ref.node in readers and spec.id not in readers[ref.node]:
                readers[ref.node].append(spec.id)
    finished: set[str] = set()
    cycles: list[list[str]] = []
    for root in node_ids:
        if root in finished:
            continue
        path: list[str] = [root]
        on_path = {root}
        stack: list[Iterator[str]] = [iter(readers[root])]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                stack.pop()
                done = path.pop()
                on_path.discard(done)
                finished.add(done)
            elif step in on_path:
                cycles.append([*path[path.index(step) :], step])
            elif step not in finished:
                path.append(step)
                on_path.add(step)
                stack.append(iter(readers[step]))
    return cycles


def check_edge(value: object, *, is_source: bool, problems: list[str]) -> bool:
    """``edge`` of a node: a bool; a source is always on the edge box, so it says
    nothing there and is refused rather than ignored."""
    if not isinstance(value, bool):
        problems.append(f"edge must be true or false, got {value!r}")
        return False
    if value and is_source:
        problems.append("edge: a source always runs on the box that captures; leave it out")
        return False
    return value


def check_max_rate(value: object, *, is_source: bool, problems: list[str]) -> float | None:
    """``max_rate`` of a node: None, or a positive number of runs per second on a
    node with inputs (a source's pace is its own). Appends what is wrong."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        problems.append(f"max_rate must be a positive number of runs per second, got {value!r}")
        return None
    if value == float("inf"):
        problems.append("max_rate must be finite (leave it out for no limit)")
        return None
    if is_source:
        problems.append("max_rate limits a node's inputs; a source has none (pace it itself)")
        return None
    return float(value)
