"""``python -m mediaflow.server``: ``mediaflow serve`` until the CLI dispatches it."""

from mediaflow.cli.serve import main

if __name__ == "__main__":
    raise SystemExit(main())
