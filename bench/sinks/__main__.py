"""``python -m bench.sinks [flags]``: runs :func:`bench.sinks.main.main`."""

from bench.sinks.main import main

raise SystemExit(main())
