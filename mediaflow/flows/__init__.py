"""Flow files: loading, node resolution and validation.

A flow is a graph of nodes declared in a TOML file (:func:`load_flow`), in a
dict of the same shape (:func:`flow_from_dict`) or from Python
(:class:`FlowBuilder`). Each path resolves every node's class, checks its
options and wiring, and returns a :class:`FlowSpec` the engine can trust, or
raises one :class:`FlowError` listing every problem (file and node named on
each line). Loading imports node modules but instantiates and starts nothing.

Built-in node and connector names live in :mod:`mediaflow.flows.registry`;
plug-ins add theirs with :func:`register_node` / :func:`register_connector`
or the ``mediaflow.nodes`` / ``mediaflow.connectors`` entry-point groups.
"""

from mediaflow.flows.builder import FlowBuilder
from mediaflow.flows.load import flow_from_dict, load_flow
from mediaflow.flows.registry import register_connector, register_node
from mediaflow.flows.spec import Edge, FlowError, FlowProblem, FlowSpec, NodeSpec, PortRef

__all__ = [
    "Edge",
    "FlowBuilder",
    "FlowError",
    "FlowProblem",
    "FlowSpec",
    "NodeSpec",
    "PortRef",
    "flow_from_dict",
    "load_flow",
    "register_connector",
    "register_node",
]
