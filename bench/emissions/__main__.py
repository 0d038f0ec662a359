"""``python -m bench.emissions [flags]``: runs :func:`bench.emissions.main.main`."""

from bench.emissions.main import main

raise SystemExit(main())
