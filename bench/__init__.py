"""Benchmarks that measure mediaflow against peers and ceilings in the same run.

Run them from the repository root, e.g. ``python -m bench.emissions``.
"""
