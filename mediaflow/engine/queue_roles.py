"""The roles of the work queue the engine runs on.

A flow's engine moves items (:class:`~mediaflow.queue.contract.Delivery`),
shares ordered streams (:class:`~mediaflow.queue.contract.Leases`), pauses and
steps flows (:class:`~mediaflow.queue.contract.Gate`), records latest values
(:class:`~mediaflow.queue.contract.LatestValues`) and samples the backlog
(:class:`~mediaflow.queue.contract.Inspection`). It never reads or requeues
dead letters (the operator's side), sweeps (retention) or closes the queue:
the session that opened it does.
"""

from __future__ import annotations

from typing import Protocol

from mediaflow.queue.contract import Delivery, Gate, Inspection, LatestValues, Leases


class EngineQueue(Delivery, Leases, Gate, LatestValues, Inspection, Protocol):
    """The roles the runner and its parts (journal, loops, reshaping) use."""
