"""Flow files: loading TOML, resolving the classes it names, validating.

The bad flows are fixture files in ``tests/flows/``, one problem each; the
table below pairs each with the node it must name and a fragment of the
message. Node classes live in ``tests/flows/nodes_here.py``, which the
loader must find because it sits next to the flow files. Flows built from
Python: ``tests/test_flows_builder.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mediaflow.flows import Edge, FlowBuilder, FlowError, PortRef, load_flow
from tests.flow_fixtures import (
    FLOWS,
    clean_registry_fixture,  # noqa: F401 - the clean_registry fixture (autouse)
    nodes_here_fixture,  # noqa: F401 - the nodes_here fixture
)

# file, node named (None: the problem is the file's, not a node's), message fragment
BAD_FLOWS: list[tuple[str, str | None, str]] = [
    ("syntax.toml", None, "line 5, column 11: invalid TOML: "),
    ("missing_id.toml", None, "[[node]] #2: missing 'id'"),
    ("duplicate_id.toml", "tick", "node 'tick': duplicate id (first used by [[node]] #1)"),
    ("bad_id.toml", None, "[[node]] #1: id 'tick.er' is not a valid id"),
    (
        "unknown_node_ref.toml",
        "double",
        "node 'double': input 'n' is wired to 'tock.n', but there is no node 'tock' "
        "(nodes: tick, double)",
    ),
    (
        "malformed_ref.toml",
        "double",
        "node 'double': input 'n': 'tick' is not a 'node.port' reference",
    ),
    ("unknown_input_port.toml", "double", "node 'double': has no input port 'm' (it has: n)"),
    (
        "unknown_output_port.toml",
        "double",
        "node 'double': input 'n' is wired to 'tick.count', but node 'tick' has no output "
        "port 'count' (it has: n)",
    ),
    (
        "kind_mismatch.toml",
        "show",
        "node 'show': input 'image' (image) cannot read 'tick.n' (number)",
    ),
    (
        "self_loop.toml",
        "double",
        "node 'double': input 'n' is wired to 'double.n', its own node",
    ),
    ("cycle.toml", "a", "node 'a': cycle a -> b -> c -> a"),
    ("required_unwired.toml", "sum", "node 'sum': input 'a' is required but not wired"),
    ("none_wired.toml", "mix", "node 'mix': none of its inputs (a, b) is wired"),
    ("no_nodes.toml", None, "the flow has no nodes"),
    ("unknown_top_key.toml", None, "unknown top-level key 'version'"),
    (
        "unknown_flow_key.toml",
        None,
        "[flow]: unknown key 'nmae' (expected: name, retention_days)",
    ),
    ("bad_flow_name.toml", None, "[flow]: name must be a non-empty string"),
    ("single_node_table.toml", None, "[node]: nodes are an array of tables; write [[node]]"),
    (
        "unknown_option.toml",
        "tick",
        "node 'tick': unknown option 'cuont' for nodes_here:Ticker (it takes: count, every_ms)",
    ),
    (
        "wrong_option_type.toml",
        "tick",
        "node 'tick': option 'count' must be int, got 'three' (str)",
    ),
    (
        "missing_option.toml",
        "title",
        "node 'title': missing required option 'label' for nodes_here:NeedsLabel",
    ),
    (
        "bad_kind_class.toml",
        "odd",
        "node 'odd': nodes_here:BadKind declares output 'pixels' with unknown kind 'pixels'",
    ),
    (
        "bad_kind_hook.toml",
        "sw",
        "node 'sw': nodes_here:Switch declares output 'out' with unknown kind 'pixels'",
    ),
    ("hook_fails.toml", "replay", "node 'replay': nodes_here:Replay.ports() failed: FileNotFound"),
    (
        "not_a_node.toml",
        "fn",
        "node 'fn': 'nodes_here:not_a_node' is not a Node subclass (it is function)",
    ),
    (
        "missing_module.toml",
        "thing",
        "node 'thing': cannot import 'no_such_module_for_mediaflow:Thing': "
        "No module named 'no_such_module_for_mediaflow'",
    ),
    (
        "missing_attr.toml",
        "thing",
        "node 'thing': cannot import 'nodes_here:Nope': module 'nodes_here' has no attribute",
    ),
    (
        "import_raises.toml",
        "thing",
        "node 'thing': cannot import 'broken_here:Thing': importing 'broken_here' raised "
        "RuntimeError: broken on purpose",
    ),
    ("unknown_builtin.toml", "asr", "node 'asr': unknown node 'speach'"),
    ("unknown_connector.toml", "cam", "node 'cam': unknown connector 'webcam' (known: camera"),
    (
        "missing_builtin.toml",
        "asr",
        "node 'asr': built-in 'ghost' is not available in this installation: No module named",
    ),
    ("use_and_connector.toml", "cam", "node 'cam': has both 'use' and 'connector'"),
    ("neither.toml", "cam", "node 'cam': needs 'use'"),
    ("inputs_not_table.toml", "double", "node 'double': 'inputs' must be a table"),
]


@pytest.mark.parametrize(("name", "node", "fragment"), BAD_FLOWS, ids=[b[0] for b in BAD_FLOWS])
def test_bad_flow_is_refused_naming_file_and_node(
    name: str, node: str | None, fragment: str
) -> None:
    path = FLOWS / name
    with pytest.raises(FlowError) as caught:
        load_flow(path)
    error = caught.value
    message = str(error)
    assert f"{path}: {fragment}" in message
    assert error.path == path
    assert error.node == node
    if node is not None:
        assert f"{path}: node {node!r}: " in message
    # Each fixture has one problem: one line, and no traceback material.
    assert len(error.problems) == 1
    assert "\n" not in message


def test_every_fixture_file_is_covered() -> None:
    covered = {name for name, _, _ in BAD_FLOWS} | {"good.toml", "nameless.toml"}
    covered |= {"many_problems.toml"}
    assert {p.name for p in FLOWS.glob("*.toml")} == covered


def test_all_problems_are_reported_at_once() -> None:
    path = FLOWS / "many_problems.toml"
    with pytest.raises(FlowError) as caught:
        load_flow(path)
    lines = str(caught.value).splitlines()
    assert [p.node for p in caught.value.problems] == ["tick", "show", "double"]
    assert len(lines) == 3
    assert all(line.startswith(f"{path}: node ") for line in lines)
    assert caught.value.node == "tick"


def test_unreadable_file() -> None:
    path = FLOWS / "does_not_exist.toml"
    with pytest.raises(FlowError, match="cannot read the flow file") as caught:
        load_flow(str(path))
    assert caught.value.path == path


def test_good_flow_edges_fan_out_and_sources(nodes_here: ModuleType) -> None:
    spec = load_flow(FLOWS / "good.toml")
    assert spec.name == "counting"
    assert spec.path == FLOWS / "good.toml"
    assert list(spec.nodes) == ["tick", "triple", "double", "sum", "alone", "log", "pics", "show"]
    assert spec.edges == tuple(
        Edge(PortRef.parse(src), PortRef.parse(dst))
        for src, dst in [
            ("tick.n", "triple.n"),
            ("tick.n", "double.n"),
            ("triple.n", "sum.a"),
            ("double.n", "sum.b"),
            ("tick.n", "alone.a"),
            ("sum.sum", "log.value"),
            ("pics.out", "show.image"),
        ]
    )
    assert spec.consumers("tick", "n") == [
        PortRef("triple", "n"),
        PortRef("double", "n"),
        PortRef("alone", "a"),
    ]
    assert spec.consumers("log", "value") == []
    assert [s.id for s in spec.sources()] == ["tick", "pics"]
    alone = spec.nodes["alone"]
    assert dict(alone.inputs) == {"a": PortRef("tick", "n")}  # optional 'b' left unwired
    assert dict(alone.input_kinds) == {"a": "number", "b": "number"}
    assert not alone.is_source
    assert spec.nodes["tick"].node_class is nodes_here.Ticker


def test_good_flow_binds_options_and_builds_fresh_instances(nodes_here: ModuleType) -> None:
    spec = load_flow(FLOWS / "good.toml")
    tick = spec.nodes["tick"]
    assert dict(tick.options) == {"count": 5}
    node = tick.factory()
    assert isinstance(node, nodes_here.Ticker)
    assert (node.count, node.every_ms) == (5, 0)
    triple = spec.nodes["triple"]
    first: Any = triple.factory()
    second: Any = triple.factory()
    assert first is not second
    assert first.factor == 3.0
    first.tags.append("mutated")
    assert second.tags == ["x"]
    assert dict(triple.options) == {"factor": 3.0, "tags": ["x"]}


def test_ports_hook_gives_per_instance_ports() -> None:
    spec = load_flow(FLOWS / "good.toml")
    assert dict(spec.nodes["pics"].output_kinds) == {"out": "image"}
    assert spec.nodes["pics"].is_source


def test_json_input_reads_a_number() -> None:
    spec = load_flow(FLOWS / "good.toml")
    assert spec.nodes["log"].input_kinds["value"] == "json"
    assert spec.consumers("sum", "sum") == [PortRef("log", "value")]


def test_name_defaults_to_file_stem() -> None:
    assert load_flow(FLOWS / "nameless.toml").name == "nameless"


def test_module_next_to_the_flow_file_is_importable(tmp_path: Path) -> None:
    module = f"beside_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(
        "from mediaflow.node import Node\nclass Beep(Node):\n    outputs = {'tone': 'audio'}\n"
    )
    flow = tmp_path / "beep.toml"
    flow.write_text(f'[[node]]\nid = "beep"\nuse = "{module}:Beep"\n')
    before = list(sys.path)
    try:
        spec = load_flow(flow)
    finally:
        sys.modules.pop(module, None)
    assert spec.nodes["beep"].node_class.__name__ == "Beep"
    assert dict(spec.nodes["beep"].output_kinds) == {"tone": "audio"}
    assert sys.path == before  # the directory was on sys.path only while importing


RETENTION_FLOW = """\
[flow]
name = "kept"
{line}

[[node]]
id = "tick"
use = "nodes_here:Ticker"
"""


@pytest.mark.parametrize(
    ("line", "days"),
    [("", None), ("retention_days = 7", 7.0), ("retention_days = 0.5", 0.5)],
)
def test_retention_days_of_kept_recordings(
    tmp_path: Path, nodes_here: ModuleType, line: str, days: float | None
) -> None:
    flow = tmp_path / "kept.toml"
    flow.write_text(RETENTION_FLOW.format(line=line))
    spec = load_flow(flow)
    assert spec.retention_days == days
    built = FlowBuilder("kept", retention_days=days).add("tick", nodes_here.Ticker).build()
    assert built.retention_days == days


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("0", "0"),
        ("-3", "-3"),
        ('"7"', "'7'"),
        ("true", "True"),
        ("inf", "inf"),
        ("nan", "nan"),
        ("[7]", "[7]"),
    ],
)
def test_retention_days_must_be_a_positive_number(
    tmp_path: Path, nodes_here: ModuleType, value: str, shown: str
) -> None:
    flow = tmp_path / "kept.toml"
    flow.write_text(RETENTION_FLOW.format(line=f"retention_days = {value}"))
    with pytest.raises(FlowError) as caught:
        load_flow(flow)
    assert str(caught.value) == (
        f"{flow}: [flow]: retention_days must be a positive number of days "
        f"(how long kept recordings stay), got {shown}"
    )
    assert caught.value.node is None


def test_same_named_module_in_another_flow_dir_is_refused(tmp_path: Path) -> None:
    module = f"twin_{tmp_path.name.replace('-', '_')}"
    flows = []
    for side in ("left", "right"):
        folder = tmp_path / side
        folder.mkdir()
        (folder / f"{module}.py").write_text(
            "from mediaflow.node import Node\nclass Beep(Node):\n    outputs = {'tone': 'audio'}\n"
        )
        flow = folder / "beep.toml"
        flow.write_text(f'[[node]]\nid = "beep"\nuse = "{module}:Beep"\n')
        flows.append(flow)
    try:
        load_flow(flows[0])
        load_flow(flows[0])  # the same directory again is fine
        with pytest.raises(FlowError) as caught:
            load_flow(flows[1])
    finally:
        sys.modules.pop(module, None)
    assert f"node 'beep': cannot import '{module}:Beep': module '{module}' next to the flow" in str(
        caught.value
    )
    assert "rename the module" in str(caught.value)
