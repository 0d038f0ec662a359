"""``mediaflow run``: one flow run from the command line, with the wall served if asked.

:func:`run_flow` is the whole command for a :class:`RunOptions`: it loads the
flow, starts the session, the periodic sweep and (with a port) the server,
logs the events worth a line on stderr, waits for ``--for``, ``--until-idle``
or a signal, and stops everything in reverse order. ``mediaflow run`` (in
:mod:`mediaflow.cli`), ``mediaflow demo`` and ``mediaflow worker`` (a
``worker`` session: no sources, no sweep, no server) call it; the parser
wiring stays with them.

Exit codes: 0 done, 1 a runtime failure (a backend, a node's setup, a source
that ended by an error and was not started again), 2 a flow-file or setting
error (nothing was started).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mediaflow.cli.listen import announce
from mediaflow.cli.loop import run_command
from mediaflow.config import ConfigError, EngineSettings, default_data_dir
from mediaflow.engine.away import without_userinfo
from mediaflow.engine.events import EventBus
from mediaflow.engine.session import FlowAlreadyRunning, RunOutcome, StopReason
from mediaflow.flows import FlowError, load_flow
from mediaflow.forward import ForwardSettings
from mediaflow.gc import GcSettings
from mediaflow.media import present_value
from mediaflow.process import FlowProcess, PartFailed
from mediaflow.queue import QueueError, queue_target

if TYPE_CHECKING:
    from mediaflow.server import ServerSettings

# The CLI's logger, whichever command runs the flow: the lines read the same.
log = logging.getLogger("mediaflow.cli")

# Events worth a line on stderr while a flow runs; the rest go to --jsonl readers,
# the server and the metrics.
LOGGED_EVENTS = {
    "cascade_retry": logging.WARNING,
    "cascade_dropped": logging.ERROR,
    "engine_degraded": logging.WARNING,
    "engine_recovered": logging.INFO,
    "queue_unavailable": logging.ERROR,
    "queue_available": logging.INFO,
    "store_unavailable": logging.WARNING,
    "store_available": logging.INFO,
    "device_lost": logging.WARNING,
    "device_restored": logging.INFO,
    "frames_skipped": logging.WARNING,
    "audio_overflow": logging.WARNING,
    "source_started": logging.INFO,
    "source_ended": logging.INFO,
    "run_started": logging.INFO,
    "worker_started": logging.INFO,
}


@dataclass(frozen=True)
class RunOptions:
    """What to run and how: the options of ``mediaflow run``.

    ``data_dir`` None means :func:`~mediaflow.config.default_data_dir`; ``port``
    None serves nothing (0 picks a free port). ``for_s`` and ``until_idle`` are
    the two ways a run ends on its own; with neither it runs until a signal.
    """

    flow: Path
    data_dir: Path | None = None
    for_s: float | None = None
    until_idle: bool = False
    jsonl: bool = False
    host: str = "127.0.0.1"
    port: int | None = None
    worker: bool = False
    """Join the flow's run as one more executor (``mediaflow worker``)."""
    watch: bool = False
    """Reload the flow file when it changes (SIGHUP reloads it in any case)."""


def run(options: RunOptions) -> int:
    """Run the flow on the configured event loop (see :mod:`mediaflow.cli.loop`).

    Blocks until the run ends; returns the exit code. ``KeyboardInterrupt``
    before the signal handlers are in place propagates to the caller.
    """
    return run_command(lambda: run_flow(options))


async def run_flow(options: RunOptions) -> int:
    """The run itself, on the running loop; returns the exit code.

    Errors are reported on stderr as one ``mediaflow: ...`` line, never raised.
    Installs SIGINT/SIGTERM handlers on the loop: either one stops the run cleanly.
    """
    data_dir = options.data_dir or default_data_dir()
    queue_url = os.environ.get("MEDIAFLOW_QUEUE")
    try:
        queue_target(queue_url, data_dir)  # refuse an unsupported setting before starting
        spec = load_flow(options.flow)
        # Every setting of the process, read once here: the parts below take them typed.
        settings = EngineSettings.from_env()
        gc_settings = GcSettings.from_env()
        # A worker joins the shared queue itself; only a flow's run forwards.
        forward = None if options.worker else ForwardSettings.from_env()
    except (FlowError, ConfigError, QueueError) as exc:  # QueueError: MEDIAFLOW_QUEUE, _SQLITE_SYNC
        print(f"mediaflow: {exc}", file=sys.stderr)
        return 2
    try:
        server_settings = _server_settings(options)
    except ConfigError as exc:
        print(f"mediaflow: cannot serve on {options.host}:{options.port}: {exc}", file=sys.stderr)
        return 1
    process = FlowProcess(
        spec,
        data_dir,
        queue_url=queue_url,
        settings=settings,
        gc_settings=gc_settings,
        server_settings=server_settings,
        host=options.host,
        port=options.port,
        flow_file=options.flow,
        watch=options.watch,
        worker=options.worker,
        forward=forward,
    )
    session = process.session
    lines = JsonlLines(sys.stdout) if options.jsonl else None
    if lines is not None:
        session.observe_emissions(lines.write)
    logger = asyncio.create_task(log_events(process.bus))
    refused = await _start(process, options)
    if refused is not None:
        code, why = refused
        print(f"mediaflow: {why}", file=sys.stderr)
        return code
    if process.url is not None:
        announce(options.host, process.url, server_settings)
    log.info(
        "%s flow %r (%d nodes, %s) with data in %s",
        "working on" if options.worker else "running",
        spec.name,
        len(spec.nodes),
        session.run_id if options.worker else f"run {session.run_id}",
        data_dir,
    )
    reason = await _wait_for_end(process, options, lines)
    try:
        outcome = await process.stop(reason)
    except QueueError as exc:
        # The last commit did not land (a full disk, the queue away): the run is
        # left unended, so the next start resumes it and loses nothing.
        logger.cancel()
        print(
            f"mediaflow: stopped without the last commit: {exc}; the next run resumes",
            file=sys.stderr,
        )
        return 1
    logger.cancel()
    summarise(outcome)
    if options.worker and lines is not None:
        # One machine-readable line for scripts and tests: what this executor ran.
        lines.write_line({"worker": outcome.run_id, "items": outcome.items})
    return report_failed_sources(outcome)


def _server_settings(options: RunOptions) -> ServerSettings | None:
    """The server's settings when the run serves (a port), read from the environment."""
    if options.port is None:
        return None
    from mediaflow.server import ServerSettings

    return ServerSettings.from_env()


async def _start(process: FlowProcess, options: RunOptions) -> tuple[int, str] | None:
    """Start ``process``; None once started, else the exit code and why it could
    not start (one line): 2 for a setting a node refused, 1 for anything else."""
    session = process.session
    try:
        await process.start()
    except PartFailed as exc:
        if exc.part == "sweep":
            return 1, f"cannot start the periodic sweep: {exc.cause}"
        return 1, f"cannot serve on {options.host}:{options.port}: {exc.cause}"
    except FlowAlreadyRunning as exc:
        return 1, str(exc)
    except (QueueError, OSError) as exc:
        return 1, f"cannot start flow {session.spec.name!r}: {exc}"
    except ConfigError as exc:
        # A node refused its options, or a setting names something that is not
        # there (a model): the flow file or the machine needs fixing, as for any
        # other bad setting.
        return 2, f"cannot start flow {session.spec.name!r}: {exc}"
    except Exception as exc:
        # A node's setup refused (an unknown device, a missing file, a bad model):
        # its message says what is wrong, a traceback would only hide it.
        log.debug("setup failed", exc_info=True)
        return 1, f"cannot start flow {session.spec.name!r}: {exc}"
    return None


class JsonlLines:
    """``--jsonl``: each emitted value as one JSON line on ``stream``.

    An emission observer (:meth:`FlowSession.observe_emissions`): it never fails
    the emitting node. When the reader goes away (``| head -3``), it stops
    writing, points the stream's descriptor at the null device (so the exit
    flush cannot fail either) and sets :attr:`closed`; the run then ends as a
    Unix tool's does, quietly.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.closed = asyncio.Event()

    def write(self, node: str, port: str, encoded: Any) -> None:
        """Write one emission (the observer)."""
        self.write_line({"node": node, "port": port, "value": present_value(encoded)})

    def write_line(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one line, unless the reader has gone."""
        if self.closed.is_set():
            return
        try:
            self._stream.write(json.dumps(record) + "\n")
            self._stream.flush()
        except (BrokenPipeError, ValueError):
            # ValueError: the stream was closed under us; either way nobody reads.
            self._reader_gone()

    def _reader_gone(self) -> None:
        self.closed.set()
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            log.debug("cannot silence the closed output", exc_info=True)


async def _wait_for_end(
    process: FlowProcess, options: RunOptions, lines: JsonlLines | None
) -> StopReason:
    """Why the run ends: the session's own reason (``idle``, ``time``), ``signal``,
    or (as for a signal) the ``--jsonl`` reader having gone."""
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop_requested.set)
    waiter = asyncio.create_task(process.wait(for_s=options.for_s, until_idle=options.until_idle))
    waits = {waiter, asyncio.create_task(stop_requested.wait())}
    if lines is not None:
        waits.add(asyncio.create_task(lines.closed.wait()))
    done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    reason: StopReason = waiter.result() if waiter in done else "signal"
    for task in waits:
        task.cancel()
    return reason


async def log_events(bus: EventBus) -> None:
    """Log each of :data:`LOGGED_EVENTS` as one line until cancelled."""
    async for event in bus.subscribe(types=frozenset(LOGGED_EVENTS)):
        data = " ".join(f"{k}={v}" for k, v in event.data.items())
        log.log(LOGGED_EVENTS[event.type], "%s %s", event.type, data)


def report_failed_sources(outcome: RunOutcome) -> int:
    """One stderr line per source that ended by an error and was not started again
    (its retries used up, or the run stopped first); the exit code: 1 if any.
    A capture that stopped for good must not look like a run that went well."""
    for node, error in sorted(outcome.failed_sources.items()):
        line = without_userinfo(f"mediaflow: source {node!r} ended by error: {error}")
        print(line, file=sys.stderr)
    return 1 if outcome.failed_sources else 0


def summarise(outcome: RunOutcome) -> None:
    """One INFO line saying how the run ended, how much it did and whether it resumed."""
    log.info(
        "%s %s: %d items in %.1f s%s",
        outcome.run_id if outcome.run_id.startswith("worker:") else f"run {outcome.run_id}",
        {"idle": "finished", "time": "stopped on time", "signal": "interrupted"}.get(
            outcome.reason, outcome.reason
        ),
        outcome.items,
        outcome.duration_s,
        " (resumed after an unclean stop)" if outcome.resumed else "",
    )
