"""``python -m bench.record [flags]``: runs :func:`bench.record.main.main`."""

from bench.record.main import main

raise SystemExit(main())
