"""Durable emissions through mediaflow against peers (Pipecat, a bare asyncio queue,
SQLite): ``python -m bench.emissions``.
"""
