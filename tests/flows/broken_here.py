"""A module that fails while being imported (for the loader's error path)."""

raise RuntimeError("broken on purpose")
