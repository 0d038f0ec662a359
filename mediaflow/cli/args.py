"""Argument types shared by the ``mediaflow`` commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from mediaflow.config import default_data_dir


def seconds(text: str) -> float:
    """A positive number of seconds (``--for``); argparse reports anything else."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("the duration must be positive")
    return value


def add_data_option(parser: argparse.ArgumentParser) -> None:
    """``--data DIR``, which every command takes (None: ``default_data_dir()``)."""
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"store, queue and state directory (default: $MEDIAFLOW_DATA or {default_data_dir()})",
    )
