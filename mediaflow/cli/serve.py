"""``mediaflow serve`` and the ``--host``/``--port`` of ``mediaflow run``.

Wire into the main parser with :func:`add_parser` (the ``serve`` command,
dispatched to :func:`run`) and :func:`add_server_options` (``run``'s flags);
``run`` serves next to its session through
:class:`~mediaflow.process.FlowProcess` and says where with :func:`announce`. Environment
variables mirror the flags: ``MEDIAFLOW_HOST``, ``MEDIAFLOW_PORT``,
``MEDIAFLOW_QUEUE``, plus the server's own (``MEDIAFLOW_TOKEN``,
``MEDIAFLOW_LOCK_READS``, ``MEDIAFLOW_CORS_ORIGINS``, ``MEDIAFLOW_MAX_UPLOAD``,
``MEDIAFLOW_SENDFILE``), and the periodic sweep's (``ARTIFACT_GC_INTERVAL_S``,
``ARTIFACT_MAX_BYTES`` ...: see :mod:`mediaflow.gc`).

Exit codes: 0 stopped by a signal, 1 cannot listen or open a backend, 2 a bad setting.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mediaflow.cli.args import add_data_option
from mediaflow.cli.listen import add_server_options, announce, url_host
from mediaflow.cli.loop import run_command
from mediaflow.config import ConfigError, default_data_dir, sqlite_sync

if TYPE_CHECKING:
    pass

log = logging.getLogger("mediaflow.cli")

COMMAND = "serve"


def _default_port() -> int:
    raw = os.environ.get("MEDIAFLOW_PORT")
    return int(raw) if raw and raw.isdigit() else 8765


def add_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add the ``serve`` command to ``subparsers`` (``add_subparsers()``'s result)."""
    parser = subparsers.add_parser(
        COMMAND,
        help="serve the artifact store, the API and the wall without running a flow",
        description="Serve artifacts, flows (as the state store recorded them), events, "
        "metrics and the wall from a data directory.",
        parents=list(parents),
    )
    add_server_options(parser, port_default=_default_port())
    parser.add_argument(
        "--queue",
        default=os.environ.get("MEDIAFLOW_QUEUE"),
        help="work queue to report on (default: $MEDIAFLOW_QUEUE or SQLite in the data dir)",
    )
    add_data_option(parser)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM. Blocks; returns the exit code."""
    try:
        return run_command(lambda: _serve(args))
    except KeyboardInterrupt:
        return 0


async def _serve(args: argparse.Namespace) -> int:
    from mediaflow.gc import GcSettings, start_periodic
    from mediaflow.queue import QueueError, queue_target
    from mediaflow.server import AppState, ServerSettings, bound_port, start_server

    data_dir = args.data or default_data_dir()
    try:
        settings = ServerSettings.from_env()
        gc_settings = GcSettings.from_env()
        sync = sqlite_sync()
        from_flag = args.queue != os.environ.get("MEDIAFLOW_QUEUE")
        queue_target(args.queue, data_dir, name="--queue" if from_flag else "MEDIAFLOW_QUEUE")
    except (ConfigError, QueueError) as exc:  # QueueError: the queue, MEDIAFLOW_SQLITE_SYNC
        print(f"mediaflow: {exc}", file=sys.stderr)
        return 2
    try:
        state = AppState.for_serve(
            data_dir,
            settings=settings,
            queue_url=args.queue,
            gc_settings=gc_settings,
            sqlite_sync=sync,
        )
    except (QueueError, OSError) as exc:
        print(f"mediaflow: cannot open {data_dir}: {exc}", file=sys.stderr)
        return 1
    try:
        runner = await start_server(state, args.host, args.port)
    except OSError as exc:
        await state.close()
        print(f"mediaflow: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    try:
        sweeping = start_periodic(data_dir, args.queue, state.bus, gc_settings, sqlite_sync=sync)
    except QueueError as exc:
        await runner.cleanup()
        await state.close()
        print(f"mediaflow: cannot start the periodic sweep: {exc}", file=sys.stderr)
        return 1
    announce(args.host, f"http://{url_host(args.host)}:{bound_port(runner)}", settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        if sweeping is not None:
            await sweeping.stop()
        await runner.cleanup()
        await state.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mediaflow.cli.serve [--port N] ...`` until the main CLI dispatches here."""
    parser = argparse.ArgumentParser(prog="mediaflow")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([COMMAND, *(sys.argv[1:] if argv is None else argv)])
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
