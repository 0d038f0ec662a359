"""mediaflow: a durable media streaming pipeline for cameras and microphones.

The public API: subclass :class:`Node`, emit :class:`MediaRef` values saved with
:func:`save_artifact`, build flows from TOML (:func:`load_flow`) or Python
(:class:`FlowBuilder`) and run them with :class:`FlowSession` (its tunables:
:class:`EngineSettings`) or ``mediaflow run``.
"""

from __future__ import annotations

from mediaflow.config import EngineSettings
from mediaflow.engine.session import FlowSession, RunOutcome
from mediaflow.flows import FlowBuilder, FlowError, FlowSpec, load_flow
from mediaflow.media import MediaRef, PortKindError
from mediaflow.node import Context, ItemInfo, ItemRefused, MoreContext, Node, RetryPolicy
from mediaflow.store import save_artifact

__all__ = [
    "Context",
    "EngineSettings",
    "FlowBuilder",
    "FlowError",
    "FlowSession",
    "FlowSpec",
    "ItemInfo",
    "ItemRefused",
    "MediaRef",
    "MoreContext",
    "Node",
    "PortKindError",
    "RetryPolicy",
    "RunOutcome",
    "load_flow",
    "save_artifact",
]
