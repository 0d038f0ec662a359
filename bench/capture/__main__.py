"""``python -m bench.capture [flags]``: runs :func:`bench.capture.main.main`."""

from bench.capture.main import main

raise SystemExit(main())
