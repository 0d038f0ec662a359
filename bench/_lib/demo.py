"""The bundled demo's directory (its flows, sample speech and grammar), which the
scale, soak and speech benchmarks reuse.

The demo's files ship as package data under ``mediaflow/demo/`` (README, Layout;
``mediaflow demo --copy DIR`` writes them out): the bench reads them there, as
files, without importing the command that runs them.
"""

from importlib.resources import files
from pathlib import Path

DEMO_DIR = Path(str(files("mediaflow").joinpath("demo")))
