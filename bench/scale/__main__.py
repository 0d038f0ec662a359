"""``python -m bench.scale [flags]``: runs :func:`bench.scale.main.main`."""

from bench.scale.main import main

raise SystemExit(main())
