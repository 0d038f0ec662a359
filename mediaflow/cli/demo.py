"""``mediaflow demo``: the bundled demo flow on virtual devices, with the wall served.

The demo travels inside the package (``mediaflow/demo/``: the flow file, the
speech it replays and the grammar it listens for), so a wheel or ``pipx``
install runs it from any directory. It runs a synthetic camera, a microphone
replaying spoken commands, the ``speech`` node and the ``recorder``: a new user
sees frames, hears chunks, reads transcripts and plays a clip within seconds,
with no hardware. It is run exactly as ``mediaflow run DEMO/demo.toml --port
8765`` would be, periodic sweeps included (``ARTIFACT_MAX_BYTES=50MB`` holds a
demo left running to 50 MB). ``mediaflow demo --copy DIR`` writes those files
out to edit and run with ``mediaflow run``.

Wire it into the main parser with :func:`add_parser` and dispatch to :func:`run`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mediaflow.cli import run as cli_run
from mediaflow.cli.args import add_data_option, seconds
from mediaflow.cli.listen import add_server_options

COMMAND = "demo"
DEFAULT_PORT = 8765
DEMO_DIR = Path(__file__).resolve().parent.parent / "demo"
"""Where the demo's files are installed: package data, in ``mediaflow/demo``."""
DEMO_FILES = ("demo.toml", "speech/commands.wav", "grammar/commands.gram")
"""What the demo needs, relative to :data:`DEMO_DIR`; the flow file comes first."""


class DemoMissing(RuntimeError):
    """This install lacks some of the demo's files; the message names them."""


def add_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add the ``demo`` command to ``subparsers`` (``add_subparsers()``'s result)."""
    parser = subparsers.add_parser(
        COMMAND,
        help="run the bundled demo flow on virtual devices and serve the wall",
        description="Run the bundled demo flow (a virtual camera, a microphone replaying "
        "spoken commands, speech recognition and a recorder) and serve the wall: "
        "frames, audio chunks, transcripts and clips, with no hardware.",
        parents=list(parents),
    )
    parser.add_argument(
        "--for", dest="for_s", type=seconds, metavar="S", help="stop after S seconds"
    )
    parser.add_argument(
        "--copy",
        type=Path,
        metavar="DIR",
        help="write the demo's flow file, speech and grammar into DIR and exit "
        "(then: mediaflow run DIR/demo.toml --port 8765)",
    )
    add_server_options(parser, port_default=DEFAULT_PORT)
    add_data_option(parser)


def demo_flow(demo_dir: Path | None = None) -> Path:
    """The bundled flow file, after checking every file the demo needs is there.

    Raises :class:`DemoMissing` naming the missing files and the directory.
    """
    where = demo_dir or DEMO_DIR
    missing = [name for name in DEMO_FILES if not (where / name).is_file()]
    if missing:
        raise DemoMissing(
            f"this installation of mediaflow lacks the demo's {', '.join(missing)} in "
            f"{where}; reinstall it (pip install --force-reinstall mediaflow, or "
            "./scripts/demo in a clone)"
        )
    return where / DEMO_FILES[0]


def copy_demo(target: Path, demo_dir: Path | None = None) -> list[Path]:
    """Copy the demo's files into ``target`` (made if needed), keeping their layout;
    returns the paths written. Refuses to overwrite: raises ``FileExistsError``
    naming the first file already there, :class:`DemoMissing` when the install lacks
    one, ``OSError`` when the target cannot be written."""
    source = demo_flow(demo_dir).parent
    taken = [target / name for name in DEMO_FILES if (target / name).exists()]
    if taken:
        raise FileExistsError(f"{taken[0]} already exists; choose an empty directory")
    written = []
    for name in DEMO_FILES:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        written.append(Path(shutil.copyfile(source / name, target / name)))
    return written


def run(args: argparse.Namespace) -> int:
    """Run the demo until ``--for`` runs out or Ctrl-C (or copy it, with ``--copy``);
    returns the exit code: 1 when the install lacks the demo's files or a copy
    fails. Blocks."""
    try:
        if getattr(args, "copy", None) is not None:
            for path in copy_demo(args.copy):
                print(path)
            print(
                f"mediaflow demo: copied; run it with: mediaflow run {args.copy / DEMO_FILES[0]}"
                " --port 8765",
                file=sys.stderr,
            )
            return 0
        flow = demo_flow()
    except (DemoMissing, OSError) as exc:
        print(f"mediaflow demo: {exc}", file=sys.stderr)
        return 1
    print(
        "mediaflow demo: a virtual camera, spoken commands, speech recognition and "
        "4 s clips; open the wall at the URL below (Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    options = cli_run.RunOptions(
        flow=flow,
        data_dir=getattr(args, "data", None),
        for_s=getattr(args, "for_s", None),
        host=args.host,
        port=args.port,
    )
    try:
        return cli_run.run(options)
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mediaflow.cli.demo [--for S] ...`` until the main CLI dispatches here."""
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
