"""The run's heartbeat: alive, with its GC horizon, in ``state.sqlite3``.

Every touch round (a third of the lease) records the run as alive with the
earliest time a reference its nodes hold unemitted was saved (:mod:`.pins`);
a sweep deletes nothing saved at or after the horizon of a live run.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time

from mediaflow.engine.context import FlowEnv
from mediaflow.engine.state_store import StateStore

log = logging.getLogger("mediaflow.engine")


class Heartbeat:
    """Records one run as alive (``state_store`` None: a run recorded nowhere)."""

    def __init__(self, env: FlowEnv, state_store: StateStore | None) -> None:
        self._env = env
        self._state_store = state_store
        self._failing = False

    async def beat(self) -> None:
        """Record the run as alive with its GC horizon. A failed write (a full disk:
        ``state.sqlite3`` cannot grow) is logged once and tried again next round:
        raised, it would end the touch loop, and with it claims and leases."""
        run_id = self._env.run_id
        if self._state_store is None or run_id is None:
            return
        # The horizon is taken now, on the loop: every save finishing later
        # records a later saved_at (see engine.pins).
        horizon = self._env.pins.horizon(time.time())
        try:
            await asyncio.to_thread(self._state_store.heartbeat, run_id, horizon)
        except (sqlite3.Error, OSError) as exc:
            if not self._failing:
                log.error("could not record the run's heartbeat (retrying): %s", exc)
            self._failing = True
        else:
            if self._failing:
                log.warning("the run's heartbeat is recorded again")
            self._failing = False
