"""``python -m bench.speech [flags]``: runs :func:`bench.speech.main.main`."""

from bench.speech.main import main

raise SystemExit(main())
