"""``python -m bench.workers [flags]``: runs :func:`bench.workers.main.main`."""

from bench.workers.main import main

raise SystemExit(main())
