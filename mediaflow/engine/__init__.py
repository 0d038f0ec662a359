"""The engine: node API, pure scheduling reducer, async runner, events."""
