"""A flow's process: :class:`FlowProcess` (session, periodic sweep, server,
reload watcher), and the reload watcher it runs (:mod:`mediaflow.process.reload`)."""

from mediaflow.process.flow_process import FlowProcess, PartFailed

__all__ = ["FlowProcess", "PartFailed"]
