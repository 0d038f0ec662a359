"""``python -m bench.soak [flags]``: runs :func:`bench.soak.main.main`."""

from bench.soak.main import main

raise SystemExit(main())
