"""``python -m bench.speech_engines``: kept for the command the docs name; the
benchmark is :mod:`bench.speech.engines` (also ``python -m bench.speech --engines``)."""

from bench.speech.engines import main

if __name__ == "__main__":
    raise SystemExit(main())
