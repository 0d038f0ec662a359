"""Garbage collection: delete exactly what nothing references, and cap the store.

mediaflow knows what holds each artifact, so instead of deleting by age alone
a sweep keeps every *root* and takes the rest:

- a keep (``run_artifact``): a recording (``ctx.more.keep``, until the flow's
  ``retention_days``) or a hold (``ctx.more.hold``: a node still uses it);
- a live message: a queued, claimed, parked or dead-lettered item, or
  a latest value, asked of the queue backend through its contract;
- the grace period: anything saved (or saved again) in the last
  ``ARTIFACT_GC_GRACE_S``;
- an open run's horizon: what a running flow saved but has not yet emitted;
- a response that is sending it (a shared file lock).

- ``settings``: :class:`GcSettings`, read from the environment at the process
  boundary (:meth:`GcSettings.from_env`).
- ``plan``: the pure decisions (cutoff, cap excess).
- ``gcdb``: the sweep's connection to ``store.sqlite3`` and its queries.
- ``orphans``: stray files and stale temp files.
- ``sweep``: :func:`sweep_artifacts`, one sweep, step by step.
- ``sweeper``: :class:`Sweeper`, periodic sweeps and the cap watcher of a server.
- ``periodic``: :func:`start_periodic`, a sweeper with a queue of its own for a
  long-running process.
- ``forget``: :func:`forget_flow`, drop a flow that will not run again.
"""

from mediaflow.gc.forget import FlowNotForgettable, forget_flow
from mediaflow.gc.periodic import PeriodicSweep, start_periodic
from mediaflow.gc.settings import GcSettings, format_bytes, parse_bytes
from mediaflow.gc.sweep import SweepBusy, SweepProgress, SweepReport, sweep_artifacts
from mediaflow.gc.sweeper import Sweeper

__all__ = [
    "FlowNotForgettable",
    "GcSettings",
    "PeriodicSweep",
    "SweepBusy",
    "SweepProgress",
    "SweepReport",
    "Sweeper",
    "forget_flow",
    "format_bytes",
    "parse_bytes",
    "start_periodic",
    "sweep_artifacts",
]
