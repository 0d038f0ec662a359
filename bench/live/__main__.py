"""``python -m bench.live [flags]``: runs :func:`bench.live.main.main`."""

from bench.live.main import main

raise SystemExit(main())
