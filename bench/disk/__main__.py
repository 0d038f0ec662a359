"""``python -m bench.disk [flags]``: runs :func:`bench.disk.main.main`."""

from bench.disk.main import main

raise SystemExit(main())
