"""``python -m bench.serve [flags]``: runs :func:`bench.serve.main.main`."""

from bench.serve.main import main

raise SystemExit(main())
