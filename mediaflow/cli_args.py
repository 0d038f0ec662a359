"""Argument types shared by the ``mediaflow`` commands."""

from __future__ import annotations

import argparse


def seconds(text: str) -> float:
    """A positive number of seconds (``--for``); argparse reports anything else."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("the duration must be positive")
    return value
