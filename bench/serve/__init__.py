"""Serving artifacts over HTTP, mediaflow against nginx: ``python -m bench.serve``."""
