"""Scale: how many cameras and speaking microphones one machine sustains: ``python -m
bench.scale``.
"""
