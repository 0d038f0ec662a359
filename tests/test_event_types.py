"""One registry of event types (mediaflow.engine.event_types): every type mediaflow
publishes is in it, nothing else is, and the docs and the OpenAPI document list it."""

from __future__ import annotations

import ast
from pathlib import Path

from mediaflow.engine.event_types import EVENT_TYPES, markdown_table
from mediaflow.server.openapi_parts import component_schemas

ROOT = Path(__file__).resolve().parent.parent
# Calls whose first argument is an event type: the bus, ctx.more.publish, the reducer's
# command, the sweep's and the sweeper's hooks, a connector's counter report.
PUBLISHERS = {"publish", "PublishEventCommand", "Event", "_events", "_publish", "_event"}
PUBLISHERS |= {"CounterReport", "TimelineEvent"}  # an event noted on the timeline


def published_types() -> set[str]:
    """Every literal event type a call in mediaflow/ or connectors/ publishes."""
    found: set[str] = set()
    for package in ("mediaflow", "connectors"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name not in PUBLISHERS:
                    continue
                for arg in node.args[:2]:  # the type; an Event's comes after its id
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        found.add(arg.value)
    return found


def test_the_registry_names_exactly_the_types_mediaflow_publishes() -> None:
    published = published_types()
    # ``"worker_finished" if worker else "run_finished"``: a conditional, not a literal.
    published |= {"worker_finished", "run_finished"}
    assert published == set(EVENT_TYPES)


def test_the_docs_list_the_registry() -> None:
    text = (ROOT / "docs" / "http-api.md").read_text()
    assert markdown_table() in text


def test_the_openapi_event_schema_lists_the_registry() -> None:
    event = component_schemas()["Event"]
    assert event["properties"]["event"]["examples"] == list(EVENT_TYPES)
