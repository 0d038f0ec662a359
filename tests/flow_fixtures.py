"""What the flow spec tests (``tests/test_flows_*.py``) share: the fixture flow
files in ``tests/flows/``, a clean registry for every test (autouse), and the
fixture node module as the loader imports it.

Import the fixtures by their function names, which differ from the fixture names
so that a test's ``nodes_here`` argument does not shadow an import (an imported
autouse fixture applies to every test of the importing module)::

    from tests.flow_fixtures import clean_registry_fixture  # noqa: F401 - fixture
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import MappingProxyType, ModuleType

import pytest

from mediaflow.flows import load_flow, registry

FLOWS = Path(__file__).parent / "flows"


@pytest.fixture(name="clean_registry", autouse=True)
def clean_registry_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh run-time registrations per test, plus a built-in whose module is missing."""
    monkeypatch.setattr(registry, "_registered_nodes", {})
    monkeypatch.setattr(registry, "_registered_connectors", {})
    builtins = {**registry.BUILTIN_NODES, "ghost": "mediaflow.nodes.ghost:GhostNode"}
    monkeypatch.setattr(registry, "BUILTIN_NODES", MappingProxyType(builtins))


@pytest.fixture(name="nodes_here")
def nodes_here_fixture() -> ModuleType:
    """The fixture node module, as the loader imports it (top-level name ``nodes_here``)."""
    load_flow(FLOWS / "good.toml")  # imports it from next to the flow file
    return sys.modules["nodes_here"]
