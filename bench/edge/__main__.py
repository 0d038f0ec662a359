"""``python -m bench.edge [flags]``: runs :func:`bench.edge.main.main`."""

from bench.edge.main import main

raise SystemExit(main())
