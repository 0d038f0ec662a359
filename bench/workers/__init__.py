"""Workers: one executor process against two for a CPU-bound node: ``python -m bench.workers``."""
