"""The ``mediaflow`` command line: the parser and :func:`main`, which dispatches.

Each command's work lives in its own module (``run`` in :mod:`mediaflow.cli.run`,
``serve`` in :mod:`mediaflow.cli.serve`, ...).

Exit codes: 0 done, 1 a runtime failure (a backend, a node's setup), 2 a usage
or flow-file error (nothing was started), 130 interrupted before a clean stop.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from mediaflow.cli import demo as cli_demo
from mediaflow.cli import devices as cli_devices
from mediaflow.cli import export as cli_export
from mediaflow.cli import flows as cli_flows
from mediaflow.cli import gc as cli_gc
from mediaflow.cli import run as cli_run
from mediaflow.cli import serve as cli_serve
from mediaflow.cli import trace as cli_trace
from mediaflow.cli.args import add_data_option, seconds
from mediaflow.cli.listen import add_server_options


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
    run.add_argument(
        "--watch",
        action="store_true",
        help="reload the flow file when it changes (SIGHUP always reloads it): queued work "
        "goes to the new nodes, unchanged sources keep running",
    )
    add_server_options(run, port_default=None)
    add_data_option(run)
    worker = sub.add_parser(
        "worker",
        help="join a running flow as one more executor (no sources; SIGTERM finishes "
        "what it holds)",
        description="Run the flow's nodes on work its `mediaflow run` enqueues, beside "
        "it, on this machine or another that reaches the same queue (MEDIAFLOW_QUEUE) "
        "and store (MEDIAFLOW_STORE). Ordered nodes' streams are shared through leases; "
        "SIGTERM or SIGINT finishes what this worker holds and stops claiming; work of a "
        "killed worker is taken over within MEDIAFLOW_LEASE_MS.",
        parents=[common],
    )
    worker.add_argument("flow", type=Path, help="the flow file (TOML), as the run has it")
    worker.add_argument(
        "--for", dest="for_s", type=seconds, metavar="S", help="stop after S seconds"
    )
    worker.add_argument(
        "--jsonl",
        action="store_true",
        help="write one line per emitted value to stdout, and a summary line at the end",
    )
    add_data_option(worker)
    cli_serve.add_parser(sub, parents=[common])
    cli_devices.add_parser(sub, parents=[common])
    cli_demo.add_parser(sub, parents=[common])
    cli_gc.add_parser(sub, parents=[common])
    cli_trace.add_parser(sub, parents=[common])
    cli_flows.add_parser(sub, parents=[common])
    cli_export.add_parser(sub, parents=[common])
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
            return cli_run.run(run_options(args))
        if args.command == "worker":
            return cli_run.run(worker_options(args))
        if args.command == cli_serve.COMMAND:
            return cli_serve.run(args)
        if args.command == cli_devices.COMMAND:
            return cli_devices.run(args)
        if args.command == cli_demo.COMMAND:
            return cli_demo.run(args)
        if args.command == cli_gc.COMMAND:
            return cli_gc.run(args)
        if args.command == cli_trace.COMMAND:
            return cli_trace.run(args)
        if args.command == cli_flows.COMMAND:
            return cli_flows.run(args)
        if args.command == cli_export.COMMAND:
            return cli_export.run(args)
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command!r}")
    return 2


def run_options(args: argparse.Namespace) -> cli_run.RunOptions:
    """The ``run`` command's parsed arguments as :class:`~mediaflow.cli.run.RunOptions`."""
    return cli_run.RunOptions(
        flow=args.flow,
        data_dir=args.data,
        for_s=args.for_s,
        until_idle=args.until_idle,
        jsonl=args.jsonl,
        host=args.host,
        port=args.port,
        watch=args.watch,
    )


def worker_options(args: argparse.Namespace) -> cli_run.RunOptions:
    """The ``worker`` command's parsed arguments as :class:`~mediaflow.cli.run.RunOptions`."""
    return cli_run.RunOptions(
        flow=args.flow, data_dir=args.data, for_s=args.for_s, jsonl=args.jsonl, worker=True
    )


if __name__ == "__main__":
    raise SystemExit(main())
