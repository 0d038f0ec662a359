"""Speech: what recognition costs and how many microphones run in real time: ``python
-m bench.speech``.
"""
