"""Reference-aware GC against age-only deletion: ``python -m bench.gc``."""
