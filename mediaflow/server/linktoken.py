"""Wall links as self-contained signed tokens: make one, check one. Pure (time is an argument).

A link is ``mfl1.<claims>.<signature>``, three parts in the URL-safe base64
alphabet (no padding) joined by dots:

* ``claims``: compact JSON ``{"exp": ms, "flow": name, "iat": ms}`` (Unix
  milliseconds: issued at, expires at);
* ``signature``: HMAC-SHA256 of the ASCII bytes ``mfl1.<claims>`` under a key
  derived from ``MEDIAFLOW_TOKEN`` (:func:`link_key`; a label separates it from
  the wall cookie's keyed hash, which browsers hold).

No server state: a link survives a restart, and changing the token revokes
every link. Checking order is fixed so the error says what is wrong: the
shape (:class:`MalformedLink`), then the signature compared in constant time
(:class:`ForgedLink`: altered, made up, or signed with another token), then
the claims, then the expiry (:class:`ExpiredLink`). Both parts must be in
their one canonical encoding, so no two strings are the same link.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from mediaflow.flows.spec import NAME_RE

PREFIX = "mfl1"
MAX_LINK_LEN = 1024
_B64_RE = re.compile(r"[A-Za-z0-9_-]+")
_KEY_LABEL = b"mediaflow wall link key v1"
_SIGNATURE_LEN = hashlib.sha256().digest_size


class LinkError(ValueError):
    """A link that opens nothing. ``reason`` is a stable word for clients."""

    reason = "invalid_link"


class MalformedLink(LinkError):
    reason = "malformed"


class ForgedLink(LinkError):
    reason = "bad_signature"


class ExpiredLink(LinkError):
    reason = "expired"


@dataclass(frozen=True)
class LinkClaims:
    """What a link says: the flow it opens and its window, in Unix milliseconds."""

    flow: str
    issued_ms: int
    expires_ms: int

    @property
    def issued_at(self) -> float:
        return self.issued_ms / 1000

    @property
    def expires_at(self) -> float:
        return self.expires_ms / 1000


def link_key(token: str) -> bytes:
    """The signing key for links, derived from ``MEDIAFLOW_TOKEN``."""
    return hmac.new(token.encode(), _KEY_LABEL, hashlib.sha256).digest()


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    """Decode canonical unpadded URL-safe base64; :class:`MalformedLink` otherwise."""
    if _B64_RE.fullmatch(text) is None:
        raise MalformedLink(f"malformed link: its {what} is not URL-safe base64")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise MalformedLink(f"malformed link: its {what} is not URL-safe base64") from None
    if _b64encode(data) != text:  # unused trailing bits set: another spelling of the bytes
        raise MalformedLink(f"malformed link: its {what} is not canonically encoded")
    return data


def _signature(key: bytes, signed: str) -> bytes:
    return hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()


def make_link(key: bytes, claims: LinkClaims) -> str:
    """The link for ``claims``. Raises ``ValueError`` for a bad flow name or window, or
    a flow name so long the link would exceed :data:`MAX_LINK_LEN`."""
    if NAME_RE.fullmatch(claims.flow) is None:
        raise ValueError(f"not a flow name: {claims.flow!r}")
    if claims.expires_ms <= claims.issued_ms:
        raise ValueError("a link must expire after it is issued")
    body = {"exp": claims.expires_ms, "flow": claims.flow, "iat": claims.issued_ms}
    encoded = _b64encode(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    signed = f"{PREFIX}.{encoded}"
    link = f"{signed}.{_b64encode(_signature(key, signed))}"
    if len(link) > MAX_LINK_LEN:
        raise ValueError(f"the flow name is too long for a link of {MAX_LINK_LEN} characters")
    return link


def read_link(key: bytes, link: str, now_ms: int) -> LinkClaims:
    """The claims of a genuine, unexpired ``link`` at ``now_ms``.

    Raises :class:`MalformedLink`, :class:`ForgedLink` or :class:`ExpiredLink`
    (all :class:`LinkError`), never anything else.
    """
    if len(link) > MAX_LINK_LEN:
        raise MalformedLink(f"malformed link: longer than {MAX_LINK_LEN} characters")
    parts = link.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise MalformedLink(f"malformed link: expected {PREFIX}.<claims>.<signature>")
    signature = _b64decode(parts[2], "signature")
    if len(signature) != _SIGNATURE_LEN:
        raise MalformedLink("malformed link: its signature has the wrong length")
    claims_text = parts[1]
    claims_raw = _b64decode(claims_text, "claims")  # shape first: a typo is no forgery
    if not hmac.compare_digest(signature, _signature(key, f"{PREFIX}.{claims_text}")):
        raise ForgedLink(
            "invalid link: its signature does not match (altered, made up, or made"
            " with another MEDIAFLOW_TOKEN)"
        )
    claims = _parse_claims(claims_raw)
    if now_ms >= claims.expires_ms:
        raise ExpiredLink(f"expired link: it expired at {iso_time(claims.expires_at)}")
    return claims


def _parse_claims(raw: bytes) -> LinkClaims:
    """Signed claims that do not parse mean a signing bug or a future version."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise MalformedLink("malformed link: its claims are not JSON") from None
    if not isinstance(body, dict) or set(body) != {"exp", "flow", "iat"}:
        raise MalformedLink("malformed link: its claims are not exp, flow and iat")
    flow, issued, expires = body["flow"], body["iat"], body["exp"]
    if not (isinstance(flow, str) and NAME_RE.fullmatch(flow)):
        raise MalformedLink("malformed link: its flow is not a flow name")
    if not all(type(v) is int for v in (issued, expires)) or expires <= issued:
        raise MalformedLink("malformed link: its iat and exp are not a window in milliseconds")
    return LinkClaims(flow, issued, expires)


def iso_time(seconds: float) -> str:
    """``seconds`` (Unix) as an ISO 8601 UTC time to the second, for messages."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
