"""Keeping camera passwords out of everything a user or a log can read.

A network camera is often named with its credentials (``rtsp://admin:secret@cam/``).
The URL is needed to open the stream, and nowhere else: events, logs, metrics labels,
``/api`` and error messages name the camera by :func:`public_url`, and text that may
quote the URL (FFmpeg's errors do) goes through :func:`scrub` first. Pure.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit, urlunsplit

MASK = "***"
# ``scheme://user:password@``: the userinfo of any URL quoted inside a longer text.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]*@")


def public_url(spec: str) -> str:
    """``spec`` without its password (the user name stays: it tells which account);
    anything that is not a URL with a password is returned unchanged."""
    try:
        parts = urlsplit(spec)
        password = parts.password
    except ValueError:  # a port that is not a number: still hide what looks like a password
        return _USERINFO.sub(r"\g<scheme>\g<user>@", spec)
    if password is None or not parts.scheme:
        return spec
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    netloc = f"{user}@{host}" if user else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def secrets_of(spec: str) -> tuple[str, ...]:
    """The password in ``spec``, as written and percent-decoded (empty when none)."""
    try:
        password = urlsplit(spec).password
    except ValueError:
        return ()
    if not password:
        return ()
    return tuple(dict.fromkeys((password, unquote(password), quote(unquote(password), safe=""))))


def scrub(text: str, spec: str | None = None) -> str:
    """``text`` with every ``scheme://user:password@`` reduced to ``scheme://user@`` and,
    when ``spec`` is given, every occurrence of its password replaced by ``***``."""
    cleaned = _USERINFO.sub(r"\g<scheme>\g<user>@", text)
    for secret in secrets_of(spec) if spec else ():
        cleaned = cleaned.replace(secret, MASK)
    return cleaned
