"""Flows built from Python (``FlowBuilder``, ``flow_from_dict``) by the same rules
as flow files; node and connector names resolved through the registry, entry
points and the built-ins; ``node.port`` references.

Flow files: ``tests/test_flows_toml.py``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from mediaflow.flows import (
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
from tests.flow_fixtures import (
    FLOWS,
    clean_registry_fixture,  # noqa: F401 - the clean_registry fixture (autouse)
    nodes_here_fixture,  # noqa: F401 - the nodes_here fixture
)


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
