"""Reloading ``mediaflow run``'s flow file while it runs: on SIGHUP, and with
``--watch`` whenever the file's content changes.

A file that does not load is refused with the messages a start would give and
the running flow goes on; a good one is handed to :meth:`FlowSession.reload
<mediaflow.engine.session.FlowSession.reload>` (claimed work finishes on the
old nodes, queued work waits for the new ones, nothing is lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
from pathlib import Path
from typing import Final

from mediaflow.engine.reload import ReloadRefused
from mediaflow.engine.session import FlowSession
from mediaflow.flows import FlowError, load_flow

log = logging.getLogger("mediaflow.cli")

WATCH_POLL_S: Final = 1.0


def fingerprint(path: Path) -> str | None:
    """The file's content hash (None if unreadable): a touch without an edit,
    or an editor's save of the same text, is not a change."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


async def serve_reloads(session: FlowSession, path: Path, *, watch: bool) -> None:
    """Reload ``path`` into ``session`` on SIGHUP (and, with ``watch``, when it
    changes) until cancelled."""
    hangup = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, hangup.set)
    seen = fingerprint(path)
    try:
        while True:
            if watch:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(hangup.wait(), WATCH_POLL_S)
            else:
                await hangup.wait()
            asked = hangup.is_set()
            hangup.clear()
            current = fingerprint(path)
            if not asked and current == seen:
                continue
            seen = current
            await reload_once(session, path)
    finally:
        loop.remove_signal_handler(signal.SIGHUP)


async def reload_once(session: FlowSession, path: Path) -> bool:
    """One reload attempt; True if the flow now runs the file's nodes."""
    log.info("reloading %s", path)
    try:
        spec = await asyncio.to_thread(load_flow, path)
        plan = await session.reload(spec)
    except FlowError as exc:
        return _refused(session, f"\nmediaflow: {exc}")  # as a start would say it
    except ReloadRefused as exc:
        return _refused(session, str(exc))
    except Exception as exc:
        # A new node's setup failed: nothing was changed.
        log.debug("reload failed", exc_info=True)
        return _refused(session, f"a new node failed to start: {exc}")
    if plan.is_noop:
        log.info("reload of %s: no node changed", path)
    return True


def _refused(session: FlowSession, why: str) -> bool:
    flow = session.spec.name
    log.error("reload refused, flow %r goes on unchanged: %s", flow, why.strip())
    session.bus.publish("reload_refused", {"flow": flow, "error": why.strip()})
    return False
