"""mediaflow: a durable media streaming pipeline for cameras and microphones.

The public API: subclass :class:`Node`, emit :class:`MediaRef` values saved with
:func:`save_artifact`, build flows from TOML (:func:`load_flow`) or Python
(:class:`FlowBuilder`) and run them with :class:`FlowSession` or
``mediaflow run``.

The engine, the flows and the store load on first use of their names, so a
module that needs only the media types (``devices`` does) does not pay for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mediaflow.media import MediaRef, PortKindError
from mediaflow.node import Context, ItemInfo, MoreContext, Node

if TYPE_CHECKING:
    from mediaflow.engine.session import FlowSession, RunOutcome
    from mediaflow.flows import FlowBuilder, FlowError, FlowSpec, load_flow
    from mediaflow.store import save_artifact

_LAZY = {
    "FlowSession": "mediaflow.engine.session",
    "RunOutcome": "mediaflow.engine.session",
    "FlowBuilder": "mediaflow.flows",
    "FlowError": "mediaflow.flows",
    "FlowSpec": "mediaflow.flows",
    "load_flow": "mediaflow.flows",
    "save_artifact": "mediaflow.store",
}

__all__ = [
    "Context",
    "FlowBuilder",
    "FlowError",
    "FlowSession",
    "FlowSpec",
    "ItemInfo",
    "MediaRef",
    "MoreContext",
    "Node",
    "PortKindError",
    "RunOutcome",
    "load_flow",
    "save_artifact",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mediaflow' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain module attribute
    return value
