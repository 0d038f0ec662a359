"""Live view: glass-to-glass latency, A/V sync, CPU per viewer and per stream: ``python
-m bench.live``.
"""
