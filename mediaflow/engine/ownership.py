"""Who owns a flow's run: consumer names, liveness of an owner, and taking the run.

A run belongs to one process (its *owner*, ``host:pid:token``). A new process
starts a run, or resumes the last one if it was left unended by an owner that is
gone; it refuses while that owner lives. GC asks :func:`owner_alive` too before
it treats a run's records as abandoned.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid

from mediaflow.engine.state_store import StateStore
from mediaflow.queue.contract import Delivery

log = logging.getLogger("mediaflow.engine")


class FlowAlreadyRunning(RuntimeError):
    """The flow's current run belongs to a live process."""


def new_consumer_name() -> str:
    """A name for this process's consumer, unique across hosts and restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_alive(owner: str, heartbeat_at: float, lease_s: float) -> bool:
    """Whether the process named ``owner`` (``host:pid:token``) may still be running."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host == socket.gethostname() and pid_text.isdigit():
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return time.time() - heartbeat_at < 2 * lease_s


async def take_run(
    flow: str, consumer: str, *, state_store: StateStore, queue: Delivery, lease_s: float
) -> tuple[str, bool]:
    """Start ``flow``'s run for ``consumer``, or adopt the last one left unended by
    an owner that is gone (its claimed items handed back); ``(run_id, resumed)``.

    Raises :class:`FlowAlreadyRunning` if the unended run's owner may be alive.
    """
    last = await asyncio.to_thread(state_store.last_run, flow)
    crashed = last if last is not None and not last.ended else None
    if crashed is None:
        run_id = uuid.uuid4().hex
        await asyncio.to_thread(state_store.start_run, run_id, flow, consumer)
        return run_id, False
    if owner_alive(crashed.owner, crashed.heartbeat_at, lease_s):
        raise FlowAlreadyRunning(
            f"flow {flow!r} is already running (owner {crashed.owner}); "
            "stop it first, or add executors with `mediaflow worker`"
        )
    await asyncio.to_thread(state_store.adopt_run, crashed.run_id, consumer)
    released = await queue.release_consumer(crashed.owner)
    log.warning(
        "resuming run %s of flow %r after an unclean stop: %d items handed back",
        crashed.run_id,
        flow,
        released,
    )
    return crashed.run_id, True
