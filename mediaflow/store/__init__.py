"""Content-addressed artifact store."""
