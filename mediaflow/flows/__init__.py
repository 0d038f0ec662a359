"""Flow files: loading, node resolution and validation."""
