"""``python -m bench.gc [flags]``: runs :func:`bench.gc.main.main`."""

from bench.gc.main import main

raise SystemExit(main())
