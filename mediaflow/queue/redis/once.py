"""Calls in doubt: a Redis script whose answer was lost runs once, not twice.

A call Redis ran but whose answer never arrived is *in doubt*: the connection
dropped after the command was sent (a SHUTDOWN runs the commands of its last
turn without answering them; a reply timeout; a network cut). Sending it again
as a new call would apply it twice: a commit would append its emissions again
as new items (duplicates nobody can tell from originals), a claim would take
more items while the ones it took wait out their lease, out of order, a dead
letter would be recorded twice.

So the scripts whose effect must not repeat (:data:`RUN_ONCE`) are wrapped
(:func:`run_once`): each call carries a request id, the script stores its
answer under ``P:once:<id>``, and :class:`OnceCaller` sends a call in doubt
again *with the same id* until Redis answers, with the stored answer if it ran
and by running now if it did not. A call that failed while connecting was never
sent: it fails at once, like any other. The caller forgets an answer (its key
is deleted by its next call) once it has read it; keys a dead caller leaves
behind expire after :data:`ANSWER_TTL_S`.

Any other call whose connection failed after connecting is sent once more at
once (:func:`resend_if_dropped`): that is how a pooled connection the server
dropped (a restart) fails on first use, and those calls are safe to repeat.
redis-py itself must not retry (``Retry(NoBackoff(), 0)``): its retry would
hide the first error, and with it whether the call was sent.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

RUN_ONCE: Final = ("ENQUEUE", "CLAIM", "RELEASE", "DEAD_LETTER")
"""Scripts of :mod:`.lua` and :mod:`.lua_admin` wrapped: those a
repeat would harm (a release repeated could take back an item another consumer
claimed meanwhile). A repeated ack, touch or latest value changes nothing; a
repeated reclaim finds less to do."""

IN_DOUBT_S: Final = 30.0
"""How long a call in doubt is sent again before it fails (it may then have run:
the caller retries its work, which may then be delivered twice)."""
RESEND_FIRST_S: Final = 0.05  # after one immediate resend; doubling
RESEND_MAX_S: Final = 1.0
ANSWER_TTL_S: Final = 300
"""How long Redis keeps an answer nobody read (the caller died meanwhile)."""

# ARGV after the script's own arguments: the ids of answers read (to forget),
# their count, this call's request id. The scripts read their arguments at fixed
# positions from the front, so the tail is theirs to ignore. An empty array is
# not stored (an empty claim that runs again harms nothing; see stored()).
_ONCE_TAIL: Final = f"""
local __n = #ARGV
local __forget = tonumber(ARGV[__n - 1])
for __i = __n - 1 - __forget, __n - 2 do
  redis.call('DEL', ARGV[1] .. ':once:' .. ARGV[__i])
end
local __key = ARGV[1] .. ':once:' .. ARGV[__n]
local __stored = redis.call('GET', __key)
if __stored then return cjson.decode(__stored)[1] end
local __out = __body()
if type(__out) ~= 'table' or #__out > 0 then
  redis.call('SET', __key, cjson.encode({{__out}}), 'EX', {ANSWER_TTL_S})
end
return __out
"""


def run_once(script: str) -> str:
    """``script`` (returning an integer, or a flat array of strings and integers)
    made safe to send again under the same request id (see the module docstring)."""
    return "local function __body()\n" + script + "\nend\n" + _ONCE_TAIL


def stored(reply: Any) -> bool:
    """Whether :func:`run_once` kept this answer (to be forgotten once read)."""
    return not (isinstance(reply, list) and not reply)


class Script(Protocol):
    """A registered script (redis-py's ``AsyncScript``)."""

    async def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any: ...


def never_sent(exc: BaseException) -> bool:
    """Whether redis-py failed while connecting, before anything was sent."""
    return "connecting to" in str(exc)


async def resend_if_dropped(
    send: Callable[[], Awaitable[Any]], unreachable: tuple[type[BaseException], ...]
) -> Any:
    """``await send()``; if its connection failed after connecting, once more at once
    (a new connection is made). For calls that are safe to repeat."""
    try:
        return await send()
    except unreachable as exc:
        if never_sent(exc):
            raise
    return await send()


class OnceCaller:
    """Sends :func:`run_once` scripts; one per :class:`~.queue.RedisQueue`.

    ``unreachable`` are the errors after which a call may be in doubt (redis-py's
    connection errors and timeouts).
    """

    def __init__(self, unreachable: tuple[type[BaseException], ...]) -> None:
        self._unreachable = unreachable
        self._answered: list[str] = []  # request ids whose stored answer was read

    async def call(self, script: Script, args: list[Any]) -> Any:
        """Run ``script`` with ``args`` once. Blocks while the call is in doubt and
        Redis does not answer, up to :data:`IN_DOUBT_S`; then, or at once if it
        was never sent, raises the last connection error. May be cancelled (the
        call then stays in doubt). Raises Redis's error replies as they come."""
        request = uuid.uuid4().hex
        forget, self._answered = self._answered, []
        give_up = time.monotonic() + IN_DOUBT_S
        delay = 0.0
        sent = False
        try:
            while True:
                try:
                    reply = await script(args=[*args, *forget, len(forget), request])
                except self._unreachable as exc:
                    sent = sent or not never_sent(exc)
                    if not sent or time.monotonic() >= give_up:
                        raise
                    await asyncio.sleep(delay)
                    delay = min(max(delay * 2, RESEND_FIRST_S), RESEND_MAX_S)
                    continue
                forget = []  # the call deleted them
                if stored(reply):
                    self._answered.append(request)
                return reply
        finally:
            self._answered.extend(forget)  # not known to be forgotten: next call
