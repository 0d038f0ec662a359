"""The ``mediaflow`` command line, one module per command.

:mod:`mediaflow.cli.parser` builds the parser and dispatches; ``run`` and
``worker`` live in :mod:`mediaflow.cli.run`, ``serve`` in
:mod:`mediaflow.cli.serve`, ``devices``, ``demo``, ``gc``, ``trace``,
``flows`` and ``export`` each in the module of that name. :func:`main` is the console entry
point (``mediaflow ...``, ``python -m mediaflow``, ``python -m mediaflow.cli``).
"""

from __future__ import annotations

from mediaflow.cli.parser import build_parser, main

__all__ = ["build_parser", "main"]
