"""``python -m bench.timeline [flags]``: runs :func:`bench.timeline.main.main`."""

from bench.timeline.main import main

raise SystemExit(main())
