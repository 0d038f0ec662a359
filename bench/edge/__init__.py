"""Edge boxes that ride out their uplink: catch-up rate, live latency while catching
up, forwarding CPU and memory through an outage: ``python -m bench.edge``."""
