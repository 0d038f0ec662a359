"""What the webhook sink sends and how it reads the answer. Pure: no I/O, no clock.

One POST per item. The body is compact UTF-8 JSON (:func:`body`)::

    {"id": entry id (the same on every retry and redelivery: deduplicate on it),
     "flow", "node" (the webhook node), "port" (its input the value came in on),
     "from": {"node", "port"} (the output that emitted it), "seq",
     "redelivery" (delivered before, after a crash or a requeue), "deliveries",
     "emitted_at", "sent_at" (Unix seconds; sent_at is this attempt's),
     "kind" (image, audio, video, text, number, json), "value",
     "captured_at", "duration" (a media reference's, from its meta, or null)}

A media reference (the value, or one nested in a JSON value such as an event's
``snapshot``) keeps its ``digest``, ``media_type``, ``size`` and ``meta`` and gains
``url``: ``<base_url>/artifacts/<digest>``, with ``?link=<wall link>`` when reads are
locked (:func:`with_urls`).

``X-Mediaflow-Signature: sha256=<hex>`` is the HMAC-SHA256 of the exact body bytes
under the secret (:func:`signature`). The body carries ``sent_at``, so the signature
covers the time too: a receiver that refuses a ``sent_at`` older than a few minutes
cannot be replayed an old request (:func:`verify`).

An answer is judged by its status alone (:func:`verdict`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final
from urllib.parse import quote, urlsplit, urlunsplit

from mediaflow.media import DIGEST_RE, MediaRef

SIGNATURE_HEADER: Final = "X-Mediaflow-Signature"
DELIVERY_HEADER: Final = "X-Mediaflow-Delivery"
"""The item's entry id, as in the body's ``id``: the same on every retry."""
SCHEMES: Final = frozenset({"http", "https"})
_MAX_DEPTH: Final = 32  # nested JSON deeper than this keeps its references as they are


class WebhookOptionError(ValueError):
    """An option the webhook node cannot use; the message names it, never a secret."""


def check_url(url: object, option: str = "url") -> str:
    """``url`` if it is an absolute http or https URL with a host; else
    :class:`WebhookOptionError` naming ``option`` and the URL without its credentials."""
    if not isinstance(url, str) or not url.strip():
        raise WebhookOptionError(f"{option} must be an http:// or https:// URL")
    parts = urlsplit(url.strip())
    try:
        _ = parts.port  # parsing it is the check
    except ValueError:
        raise WebhookOptionError(f"{option} {shown_url(url)!r} has a bad port") from None
    if parts.scheme.lower() not in SCHEMES or not parts.hostname:
        raise WebhookOptionError(
            f"{option} {shown_url(url)!r} must be an http:// or https:// URL with a host"
        )
    return url.strip()


def shown_url(url: str) -> str:
    """``url`` as logs, events and errors may show it: scheme, host, port and path,
    without the ``user:password@``, the query or the fragment (either may be a secret)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def signature(secret: bytes, body: bytes) -> str:
    """The ``X-Mediaflow-Signature`` value for ``body``: ``sha256=<hex>``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, header: str, now: float, max_age_s: float = 300.0) -> bool:
    """What a receiver checks: the signature matches the body (compared in constant
    time), and the body's ``sent_at`` is within ``max_age_s`` of ``now``."""
    if not hmac.compare_digest(signature(secret, body), header):
        return False
    try:
        sent_at = json.loads(body)["sent_at"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(sent_at, int | float) and abs(now - sent_at) <= max_age_s


@dataclass(frozen=True)
class Where:
    """Where a value came from and which delivery this is (the body's envelope)."""

    flow: str
    node: str
    port: str
    kind: str
    source: str  # "node.port" that emitted it
    entry_id: str
    seq: int
    deliveries: int
    emitted_at: float | None


MediaJson = Callable[[Mapping[str, Any]], dict[str, Any]]
"""Turns a reference's JSON into what the body says of it (adds its ``url``)."""


def body(where: Where, value: Any, sent_at: float, media: MediaJson | None) -> bytes:
    """The body for one item (module doc). ``media``: None when there is no
    ``base_url``, so references go as they are. Raises ``ValueError`` for a value
    JSON cannot carry (NaN)."""
    node, _, port = where.source.partition(".")
    ref = value.to_json() if isinstance(value, MediaRef) else None
    meta = ref["meta"] if ref is not None else {}
    envelope = {
        "id": where.entry_id,
        "flow": where.flow,
        "node": where.node,
        "port": where.port,
        "from": {"node": node, "port": port},
        "seq": where.seq,
        "redelivery": where.deliveries > 1,
        "deliveries": where.deliveries,
        "emitted_at": where.emitted_at,
        "sent_at": sent_at,
        "kind": where.kind,
        "value": with_urls(ref if ref is not None else value, media),
        "captured_at": meta.get("captured_at"),
        "duration": meta.get("duration"),
    }
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def is_reference(value: Any) -> bool:
    """Whether a JSON value is a media reference's JSON (a digest, a media type, a size)."""
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("digest"), str)
        and DIGEST_RE.fullmatch(value["digest"]) is not None
        and isinstance(value.get("media_type"), str)
        and "size" in value
    )


def with_urls(value: Any, media: MediaJson | None, depth: int = 0) -> Any:
    """``value`` with ``media`` applied to every reference in it (the value itself, or
    nested in objects and arrays); unchanged without ``media``."""
    if media is None or depth > _MAX_DEPTH:
        return value
    if is_reference(value):
        return media(value)
    if isinstance(value, Mapping):
        return {k: with_urls(v, media, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [with_urls(v, media, depth + 1) for v in value]
    return value


def artifact_url(base_url: str, digest: str, link: str | None) -> str:
    """``<base_url>/artifacts/<digest>``, carrying ``link`` as ``?link=`` when given."""
    url = f"{base_url.rstrip('/')}/artifacts/{digest}"
    return url if link is None else f"{url}?link={quote(link, safe='')}"


def link_window(
    now: float, ttl_s: float, emitted_at: float | None, captured_at: object
) -> tuple[int, int]:
    """A wall link's ``(issued_ms, expires_ms)`` for an item sent at ``now``.

    Issued as of the earliest of the item's emission and capture (and now): a link
    reads what its flow was seen holding from its issue on, and the flow held the
    artifact from then, not from the moment the POST goes out. It expires ``ttl_s``
    after ``now``: that long for the receiver to fetch."""
    times = [now]
    for t in (emitted_at, captured_at):
        if isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t):
            times.append(float(t))
    issued = math.floor(min(times) * 1000)
    return issued, math.floor(now * 1000) + max(1, round(ttl_s * 1000))


class Verdict(Enum):
    """What an answer means for the item."""

    DELIVERED = "delivered"  # 2xx: acked
    RETRY = "retry"  # 408, 429, 5xx: raised, so the engine retries it with backoff
    REFUSED = "refused"  # any other: the receiver will not take it; dead-lettered now


def verdict(status: int) -> Verdict:
    """The :class:`Verdict` for an HTTP status (redirects are not followed: a 3xx
    means the URL is wrong, which no retry mends)."""
    if 200 <= status < 300:
        return Verdict.DELIVERED
    if status in (408, 429) or status >= 500:
        return Verdict.RETRY
    return Verdict.REFUSED
