"""Flow specs: loading TOML, building from Python, resolving classes, validating.

The bad flows are fixture files in ``tests/flows/``, one problem each; the
table below pairs each with the node it must name and a fragment of the
message. Node classes live in ``tests/flows/nodes_here.py``, which the
loader must find because it sits next to the flow files.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import MappingProxyType, ModuleType, SimpleNamespace
from typing import Any

import pytest

from mediaflow.flows import (
    Edge,
    FlowBuilder,
    FlowError,
    FlowSpec,
    PortRef,
    flow_from_dict,
    load_flow,
    register_connector,
    register_node,
    registry,
)
from mediaflow.flows.spec import BoundFactory
from mediaflow.node import Node

FLOWS = Path(__file__).parent / "flows"


@pytest.fixture(autouse=True)
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh run-time registrations per test, plus a built-in whose module is missing."""
    monkeypatch.setattr(registry, "_registered_nodes", {})
    monkeypatch.setattr(registry, "_registered_connectors", {})
    builtins = {**registry.BUILTIN_NODES, "ghost": "mediaflow.nodes.ghost:GhostNode"}
    monkeypatch.setattr(registry, "BUILTIN_NODES", MappingProxyType(builtins))


@pytest.fixture
def nodes_here() -> ModuleType:
    """The fixture node module, as the loader imports it (top-level name ``nodes_here``)."""
    load_flow(FLOWS / "good.toml")  # imports it from next to the flow file
    return sys.modules["nodes_here"]


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


def test_builder_refuses_a_bad_retention_like_a_file(nodes_here: ModuleType) -> None:
    builder = FlowBuilder("kept", retention_days=-1).add("tick", nodes_here.Ticker)
    with pytest.raises(FlowError, match=r"^flow 'kept': retention_days must be a positive"):
        builder.build()


def _comparable(spec: FlowSpec) -> tuple[Any, ...]:
    return (spec.name, dict(spec.nodes), spec.edges)


def test_builder_builds_the_same_spec_as_toml(nodes_here: ModuleType) -> None:
    from_file = load_flow(FLOWS / "good.toml")
    built = (
        FlowBuilder("counting")
        .add("tick", nodes_here.Ticker, count=5)
        .add("triple", "nodes_here:Doubler", inputs={"n": "tick.n"}, factor=3.0, tags=["x"])
        .add("double", nodes_here.Doubler, inputs={"n": "tick.n"})
        .add("sum", nodes_here.TwoIn, inputs={"a": "triple.n", "b": "double.n"})
        .add("alone", nodes_here.TwoIn, inputs={"a": "tick.n"})
        .add("log", nodes_here.JsonSink, inputs={"value": "sum.sum"})
        .add("pics", nodes_here.Switch, kind="image")
        .add("show", nodes_here.ImageSink, inputs={"image": "pics.out"})
        .build()
    )
    assert _comparable(built) == _comparable(from_file)
    assert built.path is None
    assert isinstance(built.nodes["tick"].factory, BoundFactory)


def test_flow_from_dict_follows_the_same_rules(nodes_here: ModuleType) -> None:
    data = {
        "node": [
            {"id": "tick", "use": "nodes_here:Ticker"},
            {"id": "show", "use": "nodes_here:ImageSink", "inputs": {"image": "tick.n"}},
        ]
    }
    with pytest.raises(FlowError) as caught:
        flow_from_dict(data, name="dicty")
    assert str(caught.value) == (
        "flow 'dicty': node 'show': input 'image' (image) cannot read 'tick.n' (number)"
    )
    assert caught.value.path is None
    spec = flow_from_dict({"node": data["node"][:1]}, name="dicty")
    assert spec.name == "dicty"
    assert spec.path is None


def test_builder_reports_problems_like_a_file(nodes_here: ModuleType) -> None:
    builder = FlowBuilder("bad").add("tick", nodes_here.Ticker, cuont=3)
    builder.add("show", nodes_here.ImageSink, inputs={"image": "tick.n"})
    builder.add("x", print)  # type: ignore[arg-type]
    with pytest.raises(FlowError) as caught:
        builder.build()
    assert str(caught.value).splitlines() == [
        "flow 'bad': node 'tick': unknown option 'cuont' for nodes_here:Ticker "
        "(it takes: count, every_ms)",
        "flow 'bad': node 'x': <built-in function print> is not a Node subclass "
        "(it is builtin_function_or_method)",
    ]


def test_builder_accepts_an_instance_used_as_is(nodes_here: ModuleType) -> None:
    ticker = nodes_here.Ticker(count=9)
    spec = FlowBuilder("inst").add("tick", ticker).build()
    assert spec.nodes["tick"].factory() is ticker
    assert spec.nodes["tick"].node_class is nodes_here.Ticker
    with pytest.raises(FlowError, match="options cannot be given with a node instance"):
        FlowBuilder("inst").add("tick", ticker, count=3).build()


def test_builder_resolves_connector_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FLOWS))
    register_connector("pictures", "nodes_here:Pictures")
    spec = (
        FlowBuilder("c")
        .add("cam", "pictures")
        .add("show", "nodes_here:ImageSink", inputs={"image": "cam.image"})
        .build()
    )
    assert spec.nodes["cam"].node_class.__name__ == "Pictures"
    assert [s.id for s in spec.sources()] == ["cam"]


def test_registered_and_entry_point_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FLOWS))
    register_node("ticker", "nodes_here:Ticker")
    register_node("ticker", "nodes_here:Ticker")  # the same pair again is fine
    with pytest.raises(ValueError, match="already registered"):
        register_node("ticker", "nodes_here:Doubler")
    with pytest.raises(ValueError, match="already registered"):
        register_node("speech", "nodes_here:Doubler")  # built-ins are not replaced
    with pytest.raises(ValueError, match=r"not a 'package\.module:Class' string"):
        register_node("bad", "nodes_here.Doubler")

    def fake_entry_points(group: str) -> list[SimpleNamespace]:
        if group == registry.NODE_GROUP:
            return [SimpleNamespace(name="doubler", value="nodes_here:Doubler")]
        return []

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    spec = flow_from_dict(
        {
            "node": [
                {"id": "t", "use": "ticker"},
                {"id": "d", "use": "doubler", "inputs": {"n": "t.n"}},
            ]
        },
        name="plugins",
    )
    assert [n.node_class.__name__ for n in spec.nodes.values()] == ["Ticker", "Doubler"]
    assert "doubler" in registry.node_names()


BUILTINS = [("use", name) for name in registry.BUILTIN_NODES] + [
    ("connector", name) for name in registry.BUILTIN_CONNECTORS
]


@pytest.mark.parametrize(("key", "name"), BUILTINS)
def test_every_builtin_resolves_or_says_clearly_why_not(key: str, name: str) -> None:
    """A built-in whose module ships resolves to a Node class; one that is not
    installed is a clear flow error, never a traceback."""
    target = registry.node_target(name) or registry.connector_target(name) or ""
    module, _, attr = target.partition(":")
    try:
        node_class = getattr(importlib.import_module(module), attr)
    except ImportError:
        with pytest.raises(FlowError) as caught:
            flow_from_dict({"node": [{"id": "x", key: name}]}, path=Path("flow.toml"))
        assert str(caught.value).startswith(
            f"flow.toml: node 'x': built-in {name!r} is not available in this installation: "
            "No module named "
        )
    else:
        assert issubclass(node_class, Node)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("mic.audio", PortRef("mic", "audio")), ("cam-2.image", PortRef("cam-2", "image"))],
)
def test_port_ref_parses(text: str, expected: PortRef) -> None:
    assert PortRef.parse(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize("text", ["mic", "mic.", ".audio", "a.b.c", "1mic.audio", "mic audio"])
def test_port_ref_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a 'node\.port' reference"):
        PortRef.parse(text)


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
