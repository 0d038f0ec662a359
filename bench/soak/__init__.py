"""Soak: the demo's pieces at demo scale for ten minutes; does anything grow? ``python
-m bench.soak``.
"""
