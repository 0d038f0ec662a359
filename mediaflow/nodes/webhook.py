"""``use = "webhook"``: POST each item to a URL, signed, in order, retried, dead-lettered.

Each item wired in becomes one POST of JSON (:mod:`.webhook_payload` has the body,
the signature and what an answer means) to ``url``. The node is ordered: the next
item is not POSTed before the previous one was delivered or dead-lettered.

Failures go through the engine's retries (:class:`~mediaflow.node.RetryPolicy`): a
POST answered 5xx, 408 or 429, one that times out (``timeout_s``) or cannot connect
raises :class:`WebhookFailed`, and the item runs again after ``retry_base_s``, doubled
per failure up to ``retry_max_s``, while later items wait in the queue (on disk);
after ``max_deliveries`` failed POSTs it is a dead letter (``cascade_dropped``; the
dead-letter controls list, requeue or delete it). Any other answer (a 4xx, a
redirect) means the receiver will not take this request: the item is dead-lettered at
once (:class:`~mediaflow.node.ItemRefused`). The defaults keep trying for about an
hour and a half (1 s doubling to 60 s, 100 POSTs). The count starts again in a new
process: an item redelivered after a crash gets ``max_deliveries`` more.

Secrets: the HMAC key is read from the environment variable ``secret_env`` names
(``MEDIAFLOW_WEBHOOK_SECRET`` by default; without it set, POSTs go unsigned and a
warning says so once; a ``secret_env`` given explicitly must be set). Neither it nor
the URL's credentials or query appear in a log line, an event or an error: those name
the URL by :func:`~.webhook_payload.shown_url`.

Media references become URLs on ``base_url`` (the server's address as the receiver
reaches it). With ``MEDIAFLOW_TOKEN`` set each carries a wall link for the flow
(signed with a key derived from it, as ``POST /api/flows/{flow}/links`` makes them)
that lives ``link_ttl_s`` (a day) from the POST: a server whose reads are locked
(``MEDIAFLOW_LOCK_READS=1``) opens the artifact with it, one whose reads are open
ignores it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, ClassVar, Final

import aiohttp

from mediaflow.config import EngineSettings, env_secret
from mediaflow.engine.away import without_userinfo
from mediaflow.media import MEDIA_KINDS
from mediaflow.node import Context, ItemRefused, Node, RetryPolicy
from mediaflow.nodes.webhook_payload import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    MediaJson,
    Verdict,
    WebhookOptionError,
    Where,
    artifact_url,
    body,
    check_url,
    link_window,
    shown_url,
    signature,
    verdict,
)
from mediaflow.server.linktoken import LinkClaims, link_key, make_link

__all__ = ["DEFAULT_SECRET_ENV", "WebhookFailed", "WebhookNode"]

DEFAULT_SECRET_ENV: Final = "MEDIAFLOW_WEBHOOK_SECRET"
MAX_DELIVERIES: Final = 100
RETRY_BASE_S: Final = 1.0
RETRY_MAX_S: Final = 60.0
LINK_TTL_S: Final = 86400.0  # a wall link's default lifetime (MEDIAFLOW_LINK_DEFAULT_S)
_ANSWER_READ: Final = 64 * 1024  # an answer's body is read (and dropped) up to this much


class WebhookFailed(RuntimeError):
    """A POST that may succeed later (5xx, 408, 429, a timeout, no connection); the
    engine retries the item. The message names the URL without its secrets."""


def _policy(options: Mapping[str, Any]) -> RetryPolicy:
    attempts = options.get("max_deliveries", MAX_DELIVERIES)
    base = options.get("retry_base_s", RETRY_BASE_S)
    cap = options.get("retry_max_s", RETRY_MAX_S)
    try:
        return RetryPolicy(attempts, float(base), float(cap))
    except (TypeError, ValueError) as exc:
        raise WebhookOptionError(str(exc).replace("max_attempts", "max_deliveries")) from None


class WebhookNode(Node):
    """POSTs each item (see the module doc). Options: ``url`` (required), ``secret_env``,
    ``timeout_s`` (10), ``max_deliveries`` (100), ``retry_base_s`` (1), ``retry_max_s``
    (60), ``base_url`` (needed for media inputs), ``link_ttl_s`` (86400). It takes any
    input (:attr:`~mediaflow.node.Node.open_inputs`), of its producer's kind. Raises
    :class:`WebhookOptionError` for a bad option or a ``secret_env`` that is not set."""

    open_inputs: ClassVar[bool] = True

    def __init__(
        self,
        url: str,
        secret_env: str | None = None,
        timeout_s: float = 10.0,
        max_deliveries: int = MAX_DELIVERIES,
        retry_base_s: float = RETRY_BASE_S,
        retry_max_s: float = RETRY_MAX_S,
        base_url: str | None = None,
        link_ttl_s: float = LINK_TTL_S,
    ) -> None:
        self.url = check_url(url)
        self.shown = shown_url(self.url)
        self.secret = _secret(secret_env)
        if isinstance(timeout_s, bool) or not 0 < timeout_s < float("inf"):
            raise WebhookOptionError(f"timeout_s must be a positive number, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        _policy(
            {
                "max_deliveries": max_deliveries,
                "retry_base_s": retry_base_s,
                "retry_max_s": retry_max_s,
            }
        )
        self.base_url = None if base_url is None else check_url(base_url, "base_url")
        if self.base_url is not None and self.base_url != shown_url(self.base_url):
            raise WebhookOptionError("base_url must be scheme://host[:port][/path], nothing more")
        if isinstance(link_ttl_s, bool) or not 1 <= link_ttl_s <= 30 * 86400:
            raise WebhookOptionError(f"link_ttl_s must be 1 to 2592000 seconds, got {link_ttl_s}")
        self.link_ttl_s = float(link_ttl_s)
        self.kinds: dict[str, str] = {}  # its inputs' kinds, from the wiring (setup)
        self._link_key: bytes | None = None
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def retry_policy(cls, options: Mapping[str, Any]) -> RetryPolicy:
        return _policy(options)

    async def setup(self, ctx: Context) -> None:
        """Refuse a media input without ``base_url``; open the node's HTTP session."""
        self.kinds = {port: wire.kind for port, wire in ctx.more.wires().items()}
        wired = [p for p, kind in self.kinds.items() if kind in MEDIA_KINDS]
        if wired and self.base_url is None:
            raise WebhookOptionError(
                f"input {wired[0]!r} carries media: set base_url (the server's address as the"
                " receiver reaches it, e.g. http://host:8765) so references become URLs"
            )
        if self.secret is None:
            ctx.log.warning("%s is unset: POSTs to %s are unsigned", DEFAULT_SECRET_ENV, self.shown)
        self._link_key = ctx.more.shared(_link_key_of)
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            headers={"User-Agent": "mediaflow-webhook"},
        )

    async def run(self, ctx: Context) -> None:
        """POST the item; return once the receiver took it. Raises :class:`WebhookFailed`
        to be retried and :class:`~mediaflow.node.ItemRefused` to be dead-lettered."""
        info, session = ctx.item, self._session
        if info is None or session is None:
            raise RuntimeError("a webhook runs for an item, after setup")
        ((port, value),) = ctx.inputs.items()
        now = time.time()
        where = Where(
            ctx.flow,
            ctx.node,
            port,
            self.kinds.get(port, "json"),
            info.source,
            info.entry_id,
            info.seq,
            info.deliveries,
            info.emitted_at,
        )
        payload = body(where, value, now, self._media(ctx.flow, now, info.emitted_at))
        headers = {"Content-Type": "application/json", DELIVERY_HEADER: info.entry_id}
        if self.secret is not None:
            headers[SIGNATURE_HEADER] = signature(self.secret, payload)
        status = await self._post(session, payload, headers)
        match verdict(status):
            case Verdict.DELIVERED:
                return
            case Verdict.RETRY:
                raise WebhookFailed(f"POST {self.shown} answered {status}")
            case Verdict.REFUSED:
                raise ItemRefused(f"POST {self.shown} answered {status}, which no retry mends")

    async def _post(
        self, session: aiohttp.ClientSession, payload: bytes, headers: Mapping[str, str]
    ) -> int:
        """The answer's status; :class:`WebhookFailed` for no answer (its reason
        stripped of the URL's secrets)."""
        try:
            async with session.post(
                self.url, data=payload, headers=headers, allow_redirects=False
            ) as answer:
                await answer.content.read(_ANSWER_READ)  # then the connection is reused
                return answer.status
        except TimeoutError:
            raise WebhookFailed(
                f"POST {self.shown}: no answer within timeout_s={self.timeout_s:g}"
            ) from None
        except aiohttp.ClientError as exc:
            reason = without_userinfo(str(exc).replace(self.url, self.shown))
            raise WebhookFailed(f"POST {self.shown}: {type(exc).__name__}: {reason}") from None

    def _media(self, flow: str, now: float, emitted_at: float | None) -> MediaJson | None:
        """How a reference's JSON gains its URL (and link), or None without ``base_url``."""
        base_url, key = self.base_url, self._link_key
        if base_url is None:
            return None

        def media(ref: Mapping[str, Any]) -> dict[str, Any]:
            link = None
            if key is not None:
                meta = ref.get("meta")
                captured = meta.get("captured_at") if isinstance(meta, Mapping) else None
                issued, expires = link_window(now, self.link_ttl_s, emitted_at, captured)
                link = make_link(key, LinkClaims(flow, issued, expires))
            return {**ref, "url": artifact_url(base_url, ref["digest"], link)}

        return media

    async def teardown(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
            await asyncio.sleep(0)  # let the connector close its sockets


def _link_key_of(settings: EngineSettings) -> bytes | None:
    """The key wall links are signed with, from the session's token (None without)."""
    token = settings.store.token
    return None if token is None else link_key(token)


def _secret(secret_env: str | None) -> bytes | None:
    """The HMAC key from the environment. A ``secret_env`` named explicitly must be
    set (the error names the variable, never a value); the default may be unset."""
    name = DEFAULT_SECRET_ENV if secret_env is None else secret_env
    if not isinstance(name, str) or not name.strip():
        raise WebhookOptionError("secret_env must name an environment variable")
    value = env_secret(name)
    if value is not None:
        return value.encode()
    if secret_env is not None:
        raise WebhookOptionError(
            f"secret_env names {name}, which is not set (or empty) in this process's"
            " environment; set it to the receiver's shared secret"
        )
    return None
