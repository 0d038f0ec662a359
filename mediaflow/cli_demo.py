"""``mediaflow demo``: the bundled demo flow on virtual devices, with the wall served.

``samples/demo.toml`` (next to the ``mediaflow`` package in a clone of the
repository) runs a synthetic camera, a microphone replaying spoken commands, the
``speech`` node and the ``recorder``: a new user sees frames, hears chunks, reads
transcripts and plays a clip within seconds, with no hardware. It is run exactly as
``mediaflow run samples/demo.toml --port 8765`` would be.

Wire it into the main parser with :func:`add_parser` and dispatch to :func:`run`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mediaflow import cli_serve, eventloop
from mediaflow.cli_args import seconds

COMMAND = "demo"
DEFAULT_PORT = 8765
SAMPLES = Path(__file__).resolve().parents[1] / "samples"
DEMO_FLOW = SAMPLES / "demo.toml"


def add_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add the ``demo`` command to ``subparsers`` (``add_subparsers()``'s result)."""
    parser = subparsers.add_parser(
        COMMAND,
        help="run the bundled demo flow on virtual devices and serve the wall",
        description="Run samples/demo.toml (a virtual camera, a microphone replaying "
        "spoken commands, speech recognition and a recorder) and serve the wall: "
        "frames, audio chunks, transcripts and clips, with no hardware.",
        parents=list(parents),
    )
    parser.add_argument(
        "--for", dest="for_s", type=seconds, metavar="S", help="stop after S seconds"
    )
    cli_serve.add_server_options(parser, port_default=DEFAULT_PORT)
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        metavar="DIR",
        help="store, queue and state directory (default: as for `mediaflow run`)",
    )


def demo_flow() -> Path | None:
    """The bundled flow file, or None when this install has no ``samples/``."""
    return DEMO_FLOW if DEMO_FLOW.is_file() else None


def run(args: argparse.Namespace) -> int:
    """Run the demo until ``--for`` runs out or Ctrl-C; returns the exit code (2 when
    the samples are missing). Blocks."""
    flow = demo_flow()
    if flow is None:
        print(
            f"mediaflow demo: {DEMO_FLOW} is missing; the demo needs the samples/ "
            "directory of a clone of the repository (pip install -e .)",
            file=sys.stderr,
        )
        return 2
    # Imported here: mediaflow.cli imports this module to wire the command.
    from mediaflow import cli

    print(
        "mediaflow demo: a virtual camera, spoken commands, speech recognition and "
        "4 s clips; open the wall at the URL below (Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    namespace = argparse.Namespace(
        flow=flow,
        for_s=getattr(args, "for_s", None),
        until_idle=False,
        jsonl=False,
        host=args.host,
        port=args.port,
        data=getattr(args, "data", None),
    )
    try:
        return eventloop.run_command(lambda: cli._run(namespace))
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mediaflow.cli_demo [--for S] ...`` until the main CLI dispatches here."""
    import logging

    parser = argparse.ArgumentParser(prog="mediaflow")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([COMMAND, *(sys.argv[1:] if argv is None else argv)])
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
