"""``python -m bench.chaos [flags]``: runs :func:`bench.chaos.main.main`."""

from bench.chaos.main import main

raise SystemExit(main())
