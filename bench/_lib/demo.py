"""The bundled demo's directory (its flows, sample speech and grammar), which the
scale, soak and speech benchmarks reuse.

Kept apart from :mod:`bench._lib.common` so that the families that do not need it
(emissions' children among them) do not import the CLI. mediaflow does not export
the directory under a public name yet: this is the one place bench reads it.
"""

from mediaflow.cli.demo import DEMO_DIR as DEMO_DIR
