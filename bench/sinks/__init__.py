"""The MQTT and webhook sinks: throughput against their own clients driven bare, and
every event through a broker's or a receiver's outage: ``python -m bench.sinks``."""
