"""Talking to Redis for the queue backend: the connection, the Lua scripts,
and what a failed call raises.

:class:`RedisScripts` holds one redis-py asyncio client; :meth:`RedisScripts.run`
runs one of the backend's scripts with the key prefix and the time, and
:meth:`RedisScripts.call` one raw command. Either raises
:class:`~mediaflow.queue.contract.QueueUnavailable` naming the server (never its
password) and the operation. A call does not wait for Redis to come back, but one
whose answer was lost is sent again until Redis answers, so it runs once
(:mod:`.once`).
"""

from __future__ import annotations

import time
from typing import Any, Final
from urllib.parse import urlsplit

from mediaflow.queue.contract import QueueError, QueueUnavailable
from mediaflow.queue.redis import lua, lua_admin, lua_lease
from mediaflow.queue.redis.once import RUN_ONCE, OnceCaller, resend_if_dropped, run_once
from mediaflow.redact import public_url

CONNECT_TIMEOUT_S: Final = 5.0
"""How long connecting may take (``?socket_connect_timeout=`` in the URL overrides)."""
REPLY_TIMEOUT_S: Final = 30.0
"""How long one reply may take, so a Redis that hangs (rather than refusing
connections) is reported too; no command here blocks on the server
(``?socket_timeout=`` in the URL overrides)."""

SCRIPTS: Final = (
    "ENQUEUE", "CLAIM", "ACK", "PUT_LATEST", "TOUCH", "RELEASE", "RELEASE_CONSUMER",
    "RECLAIM", "DEAD_LETTER", "BACKLOG", "TRIM_DEAD", "FORGET_FLOW", "LEASE",
    "DROP_CONSUMER", "REQUEUE_DEAD", "DELETE_DEAD",
)  # fmt: skip


def _source(name: str) -> str:
    for module in (lua, lua_admin, lua_lease):
        text = getattr(module, name, None)
        if isinstance(text, str):
            return text
    raise KeyError(name)


class RedisScripts:
    """One Redis connection pool and the backend's scripts on it. Connects
    lazily: the constructor checks the URL and needs no event loop."""

    def __init__(self, url: str, *, prefix: str = "mediaflow") -> None:
        try:
            import redis
            import redis.asyncio
            import redis.asyncio.retry
            import redis.backoff
        except ImportError as exc:  # the ``redis`` extra
            raise QueueError(
                "the Redis queue needs redis-py: pip install 'mediaflow[redis]'"
            ) from exc
        self.url = url
        self.prefix = prefix
        self._errors = (redis.RedisError, OSError)  # what a call may raise: QueueUnavailable here
        self._unreachable = (redis.ConnectionError, redis.TimeoutError, OSError)
        self._password = urlsplit(url).password
        # No retries inside redis-py: a failed call raises QueueUnavailable at once
        # and the engine retries with its own backoff (and reports the outage)
        # instead of each call retrying for seconds unseen; and a retry there would
        # hide whether a call was sent, which .once must know. A pooled
        # connection the server dropped (a restart) is replaced by sending again
        # (.once.resend_if_dropped). URL query options override these.
        self._client = redis.asyncio.Redis.from_url(
            url,
            decode_responses=False,
            retry=redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0),
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_timeout=REPLY_TIMEOUT_S,
        )
        self._scripts = {name: self._client.register_script(_source(name)) for name in SCRIPTS}
        # Scripts that must not run twice when an answer is lost (see .once).
        self._once = {
            name: self._client.register_script(run_once(_source(name))) for name in RUN_ONCE
        }
        self._once_caller = OnceCaller(self._unreachable)
        self._closed = False

    async def run(self, script: str, *args: Any, now: float | None = None) -> Any:
        """Run one of :mod:`.lua`'s scripts with the prefix and the time."""
        if self._closed:
            raise QueueError(f"redis queue {public_url(self.url)} is closed")
        at = time.time() if now is None else now
        argv = [self.prefix, repr(at), *args]
        try:
            # A restarted Redis has forgotten the scripts: the script object
            # answers NOSCRIPT by loading the script again (SCRIPT LOAD) and retrying.
            once = self._once.get(script)
            if once is not None:  # sent again while in doubt, run once
                return await self._once_caller.call(once, argv)
            plain = self._scripts[script]
            return await resend_if_dropped(lambda: plain(args=argv), self._unreachable)
        except self._errors as exc:
            raise self._unavailable(f"the {script} script", exc) from exc

    async def call(self, *command: Any) -> Any:
        if self._closed:
            raise QueueError(f"redis queue {public_url(self.url)} is closed")
        try:
            return await resend_if_dropped(
                lambda: self._client.execute_command(*command),  # type: ignore[no-untyped-call]
                self._unreachable,
            )
        except self._errors as exc:
            raise self._unavailable(str(command[0]), exc) from exc

    def _unavailable(self, operation: str, exc: BaseException) -> QueueUnavailable:
        """The error a failed call raises: which server (no password), which
        operation, and what went wrong."""
        detail = str(exc) or type(exc).__name__
        if self._password:
            detail = detail.replace(self._password, "***")
        how = "unreachable during" if isinstance(exc, self._unreachable) else "refused"
        return QueueUnavailable(f"redis {public_url(self.url)} {how} {operation}: {detail}")

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Idempotent."""
        if not self._closed:
            self._closed = True
            await self._client.aclose()
