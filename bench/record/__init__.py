"""Recorder cost next to the camera's, in CPU seconds per clip-second: ``python -m
bench.record``.
"""
