"""``python -m bench.ipcam [flags]``: runs :func:`bench.ipcam.main.main`."""

from bench.ipcam.main import main

raise SystemExit(main())
