"""Chaos: the engine SIGKILLed mid-stream, and what the consumer still got: ``python -m
bench.chaos``.
"""
