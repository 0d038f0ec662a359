"""The pure parts of wall links, as tables: the signed token and the digest ledger."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest

from mediaflow.config import ConfigError
from mediaflow.server import ServerSettings
from mediaflow.server.linkledger import DigestLedger, digests_in
from mediaflow.server.linktoken import (
    ExpiredLink,
    ForgedLink,
    LinkClaims,
    LinkError,
    MalformedLink,
    link_key,
    make_link,
    read_link,
)

KEY = link_key("s3cret-token")
CLAIMS = LinkClaims("desk", 1_000_000, 1_060_000)
LINK = make_link(KEY, CLAIMS)
D = ["sha256:" + hashlib.sha256(bytes([i])).hexdigest() for i in range(8)]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(claims_json: bytes, key: bytes = KEY) -> str:
    """A link with any claims, correctly signed (what a signing bug would produce)."""
    body = f"mfl1.{b64(claims_json)}"
    return f"{body}.{b64(hmac.new(key, body.encode(), hashlib.sha256).digest())}"


def test_a_link_round_trips_until_it_expires() -> None:
    assert LINK.startswith("mfl1.") and LINK.count(".") == 2
    assert all(c.isalnum() or c in "-_." for c in LINK)  # URL-safe as it is
    assert read_link(KEY, LINK, 1_000_000) == CLAIMS
    assert read_link(KEY, LINK, 1_059_999) == CLAIMS
    with pytest.raises(ExpiredLink, match="expired at 1970-01-01T00:17:40Z"):
        read_link(KEY, LINK, 1_060_000)
    assert CLAIMS.issued_at == 1000.0 and CLAIMS.expires_at == 1060.0


def test_the_key_is_not_the_wall_cookie() -> None:
    from mediaflow.server.auth import cookie_value

    assert KEY.hex() != cookie_value("s3cret-token")
    assert link_key("another") != KEY


CHANGED = "mfl1." + ("B" if LINK[6] == "A" else "A").join((LINK[5], LINK[7:]))
REFUSED: list[tuple[str, str, type[LinkError]]] = [
    ("empty", "", MalformedLink),
    ("two parts", "mfl1.abc", MalformedLink),
    ("other version", "mfl2" + LINK[4:], MalformedLink),
    ("padding", LINK + "=", MalformedLink),
    ("too long", LINK + "A" * 1024, MalformedLink),
    ("short signature", LINK[:-4], MalformedLink),
    ("claims not base64", LINK.replace(".", ".*", 1), MalformedLink),
    ("claims changed", CHANGED, ForgedLink),
    ("other key", make_link(link_key("other"), CLAIMS), ForgedLink),
    ("signed garbage", signed(b"not json"), MalformedLink),
    ("signed list", signed(b"[]"), MalformedLink),
    ("extra claim", signed(b'{"exp":2,"flow":"desk","iat":1,"x":0}'), MalformedLink),
    ("bad flow", signed(b'{"exp":2,"flow":"a b","iat":1}'), MalformedLink),
    ("float times", signed(b'{"exp":2.5,"flow":"desk","iat":1}'), MalformedLink),
    ("empty window", signed(b'{"exp":1,"flow":"desk","iat":1}'), MalformedLink),
]


@pytest.mark.parametrize(("name", "link", "error"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_links(name: str, link: str, error: type[LinkError]) -> None:
    with pytest.raises(error) as caught:
        read_link(KEY, link, 1_000_000)
    assert type(caught.value) is error
    assert caught.value.reason in {"malformed", "bad_signature"}


def test_another_spelling_of_the_signature_is_refused() -> None:
    """43 characters hold the 32 signature bytes; the last one's two low bits are unused,
    so three other last characters spell the same bytes: refused, not accepted."""
    signature = LINK.rsplit(".", 1)[1]
    same_bytes = 0
    for last in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_":
        variant = signature[:-1] + last
        if variant == signature:
            continue
        with pytest.raises(LinkError) as caught:
            read_link(KEY, LINK[: -len(signature)] + variant, 1_000_000)
        if base64.urlsafe_b64decode(variant + "=") == base64.urlsafe_b64decode(signature + "="):
            same_bytes += 1
            assert isinstance(caught.value, MalformedLink)
    assert same_bytes == 3


def test_making_refuses_bad_claims() -> None:
    with pytest.raises(ValueError, match="flow name"):
        make_link(KEY, LinkClaims("a/b", 1, 2))
    with pytest.raises(ValueError, match="expire after"):
        make_link(KEY, LinkClaims("desk", 2, 2))


DIGESTS_IN: list[tuple[Any, set[str]]] = [
    (None, set()),
    (3.5, set()),
    ("frame 4", set()),
    (D[0], {D[0]}),
    ({"digest": D[0], "meta": {"parts": [D[1], {"x": D[2]}]}}, {D[0], D[1], D[2]}),
    (f"/artifacts/{D[3]}?type=image/png and {D[4]}", {D[3], D[4]}),
    ({D[5]: "as a key"}, {D[5]}),
    (D[6] + "0", set()),  # 65 hex digits: not a digest
    ("SHA256:" + D[0][7:], set()),
    (D[0].upper(), set()),
]


@pytest.mark.parametrize(("value", "expected"), DIGESTS_IN)
def test_digests_in(value: Any, expected: set[str]) -> None:
    assert digests_in(value) == expected


def test_digests_in_a_deep_value() -> None:
    value: Any = D[7]
    for _ in range(5000):  # deeper than the recursion limit
        value = [value]
    assert digests_in(value) == {D[7]}


def test_the_ledger_knows_when_a_digest_was_last_seen_held() -> None:
    ledger = DigestLedger(per_port=8)
    ledger.observe("desk", "cam", "image", {"digest": D[0]}, 10.0)
    ledger.observe("desk", "cam", "image", {"digest": D[1]}, 20.0)
    ledger.observe("desk", "cam", "image", {"digest": D[1]}, 30.0)
    ledger.observe("yard", "cam", "image", {"digest": D[2]}, 40.0)
    ledger.observe("desk", "cam", "text", "no artifacts", 50.0)
    assert ledger.held_since("desk", D[0], 10.0)
    assert not ledger.held_since("desk", D[0], 10.001)
    assert ledger.held_since("desk", D[1], 30.0)
    assert not ledger.held_since("desk", D[2], 0.0)  # another flow's
    assert ledger.held_since("yard", D[2], 40.0)
    assert list(ledger.ports("desk")) == [("desk", "cam", "image")]
    ledger.observe("desk", "cam", "image", {"digest": D[1]}, 25.0)  # a late report
    assert ledger.held_since("desk", D[1], 30.0)  # keeps the latest time


def test_the_ledger_is_bounded_per_port_and_in_ports() -> None:
    ledger = DigestLedger(per_port=2, max_ports=2)
    for i in range(3):
        ledger.observe("desk", "cam", "image", D[i], float(i))
    assert not ledger.held_since("desk", D[0], 0.0)  # least recently seen went first
    assert ledger.held_since("desk", D[1], 0.0) and ledger.held_since("desk", D[2], 0.0)
    ledger.observe("desk", "mic", "audio", D[3], 5.0)
    ledger.observe("yard", "cam", "image", D[4], 6.0)  # a third port: desk.cam goes
    assert not ledger.held_since("desk", D[2], 0.0)
    assert ledger.held_since("desk", D[3], 0.0) and ledger.held_since("yard", D[4], 0.0)
    with pytest.raises(ValueError):
        DigestLedger(per_port=0)


def test_link_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (ServerSettings().link_default_s, ServerSettings().link_max_s) == (86400, 2592000)
    monkeypatch.setenv("MEDIAFLOW_LINK_MAX_S", "3600")
    monkeypatch.setenv("MEDIAFLOW_LINK_HISTORY", "16")
    settings = ServerSettings.from_env()
    assert (settings.link_default_s, settings.link_max_s, settings.link_history) == (
        3600,
        3600,
        16,
    )
    monkeypatch.setenv("MEDIAFLOW_LINK_DEFAULT_S", "7200")
    with pytest.raises(ConfigError, match="MEDIAFLOW_LINK_DEFAULT_S"):
        ServerSettings.from_env()
    monkeypatch.setenv("MEDIAFLOW_LINK_HISTORY", "0")
    with pytest.raises(ConfigError, match="MEDIAFLOW_LINK_HISTORY"):
        ServerSettings.from_env()


def test_a_flow_name_too_long_for_a_link() -> None:
    with pytest.raises(ValueError, match="too long"):
        make_link(KEY, LinkClaims("f" * 800, 1, 2))
