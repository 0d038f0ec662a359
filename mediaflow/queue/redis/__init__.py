"""The distributed work-queue backend: Redis Streams (the ``redis`` extra).

:class:`~mediaflow.queue.redis.queue.RedisQueue` (:mod:`.queue`) turns each
operation into one call of a Lua script: :mod:`.lua` (the layout, the prelude
and the hot path), :mod:`.lua_admin` and :mod:`.lua_lease` hold the scripts;
:mod:`.client` owns the connection and loads them, :mod:`.once` makes a call
whose answer was lost run once, :mod:`.rows` converts arguments and replies and
:mod:`.live` reads the digests GC keeps.

Importing this package does not import redis-py; the first connection does.
"""
