"""Disk use of ``mediaflow demo`` over time, with a disk cap and without one: ``python
-m bench.disk``.
"""
