"""The ``mediaflow`` command line.

Exit codes: 0 done, 1 a runtime failure (a backend, a node's setup), 2 a usage
or flow-file error (nothing was started), 130 interrupted before a clean stop.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from mediaflow import cli_demo, cli_devices, cli_gc, cli_serve, eventloop
from mediaflow.cli_args import add_data_option, seconds
from mediaflow.config import ConfigError, EngineSettings, default_data_dir
from mediaflow.engine.events import EventBus
from mediaflow.engine.session import FlowAlreadyRunning, FlowSession, RunOutcome
from mediaflow.flows import FlowError, load_flow
from mediaflow.gc import GcSettings
from mediaflow.queue import QueueError, UnsupportedQueue, queue_path

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
    "device_lost": logging.WARNING,
    "device_restored": logging.INFO,
    "frames_skipped": logging.WARNING,
    "audio_overflow": logging.WARNING,
    "source_started": logging.INFO,
    "source_ended": logging.INFO,
    "run_started": logging.INFO,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mediaflow",
        description="Durable media pipelines for cameras and microphones.",
    )
    _add_verbosity(parser, argparse.SUPPRESS)
    parser.set_defaults(verbose=0, quiet=False)
    # The same flags after the command name (`mediaflow run -v ...`) without
    # resetting what was given before it.
    common = argparse.ArgumentParser(add_help=False)
    _add_verbosity(common, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a flow file", parents=[common])
    run.add_argument("flow", type=Path, help="the flow file (TOML)")
    stop = run.add_mutually_exclusive_group()
    stop.add_argument("--for", dest="for_s", type=seconds, metavar="S", help="stop after S seconds")
    stop.add_argument(
        "--until-idle",
        action="store_true",
        help="exit 0 once every source has ended and the queue has drained",
    )
    run.add_argument(
        "--jsonl",
        action="store_true",
        help='write one line per emitted value to stdout: {"node", "port", "value"}',
    )
    cli_serve.add_server_options(run, port_default=None)
    add_data_option(run)
    cli_serve.add_parser(sub, parents=[common])
    cli_devices.add_parser(sub, parents=[common])
    cli_demo.add_parser(sub, parents=[common])
    cli_gc.add_parser(sub, parents=[common])
    return parser


def _add_verbosity(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "-v", "--verbose", action="count", default=default, help="more logging (-vv for debug)"
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="only errors on stderr"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = (
        logging.ERROR
        if args.quiet
        else [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose + 1, 2)]
    )
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per HTTP request (every frame the wall shows) only when asked for: -v.
    logging.getLogger("mediaflow.http.access").setLevel(
        logging.INFO if args.verbose >= 1 and not args.quiet else logging.WARNING
    )
    try:
        if args.command == "run":
            return eventloop.run_command(lambda: _run(args))
        if args.command == cli_serve.COMMAND:
            return cli_serve.run(args)
        if args.command == cli_devices.COMMAND:
            return cli_devices.run(args)
        if args.command == cli_demo.COMMAND:
            return cli_demo.run(args)
        if args.command == cli_gc.COMMAND:
            return cli_gc.run(args)
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command!r}")
    return 2


async def _run(args: argparse.Namespace) -> int:
    data_dir = args.data or default_data_dir()
    queue_url = os.environ.get("MEDIAFLOW_QUEUE")
    try:
        queue_path(queue_url, data_dir)  # refuse an unsupported setting before starting
        spec = load_flow(args.flow)
        settings = EngineSettings.from_env()
        gc_settings = GcSettings.from_env()
    except (FlowError, ConfigError, UnsupportedQueue) as exc:
        print(f"mediaflow: {exc}", file=sys.stderr)
        return 2
    bus = EventBus()
    session = FlowSession(
        spec,
        data_dir,
        queue_url=queue_url,
        settings=settings,
        bus=bus,
        jsonl=sys.stdout if args.jsonl else None,
    )
    logger = asyncio.create_task(_log_events(bus))
    try:
        await session.start()
    except FlowAlreadyRunning as exc:
        print(f"mediaflow: {exc}", file=sys.stderr)
        return 1
    except (QueueError, OSError) as exc:
        print(f"mediaflow: cannot start flow {spec.name!r}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        # A node's setup refused (an unknown device, a missing file, a bad model):
        # its message says what is wrong, a traceback would only hide it.
        log.debug("setup failed", exc_info=True)
        print(f"mediaflow: cannot start flow {spec.name!r}: {exc}", file=sys.stderr)
        return 1
    try:
        sweeping = cli_gc.start_periodic(data_dir, queue_url, bus, gc_settings)
    except QueueError as exc:
        await session.stop("error")
        print(f"mediaflow: cannot start the periodic sweep: {exc}", file=sys.stderr)
        return 1
    served = None
    if args.port is not None:
        try:
            served = await cli_serve.serve_session(
                session, args.host, args.port, gc_settings=gc_settings
            )
        except (ConfigError, OSError) as exc:
            if sweeping is not None:
                await sweeping.stop()
            await session.stop("error")
            print(f"mediaflow: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
    log.info(
        "running flow %r (%d nodes, run %s) with data in %s",
        spec.name,
        len(spec.nodes),
        session.run_id,
        data_dir,
    )
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop_requested.set)
    waiter = asyncio.create_task(session.wait(for_s=args.for_s, until_idle=args.until_idle))
    signalled = asyncio.create_task(stop_requested.wait())
    done, _ = await asyncio.wait({waiter, signalled}, return_when=asyncio.FIRST_COMPLETED)
    reason = waiter.result() if waiter in done else "signal"
    waiter.cancel()
    signalled.cancel()
    if served is not None:
        await served.close()
    if sweeping is not None:
        await sweeping.stop()
    outcome = await session.stop(reason)
    logger.cancel()
    _summarise(outcome)
    return 0


async def _log_events(bus: EventBus) -> None:
    async for event in bus.subscribe(types=frozenset(LOGGED_EVENTS)):
        data = " ".join(f"{k}={v}" for k, v in event.data.items())
        log.log(LOGGED_EVENTS[event.type], "%s %s", event.type, data)


def _summarise(outcome: RunOutcome) -> None:
    log.info(
        "run %s %s: %d items in %.1f s%s",
        outcome.run_id,
        {"idle": "finished", "time": "stopped on time", "signal": "interrupted"}.get(
            outcome.reason, outcome.reason
        ),
        outcome.items,
        outcome.duration_s,
        " (resumed after an unclean stop)" if outcome.resumed else "",
    )


if __name__ == "__main__":
    raise SystemExit(main())
