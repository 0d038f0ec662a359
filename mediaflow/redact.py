"""Keeping passwords out of what mediaflow tells: a broker's, a queue's or a service's.

A URL may carry credentials (``redis://user:secret@host``, ``mqtt://home:pw@broker``).
Events, logs, ``/api`` and error messages name it by :func:`public_url`, and text
that may quote one (a client library's error) goes through :func:`scrub`. Pure.

``devices/redact.py`` does the same for cameras, with the camera's own password
scrubbed from text besides: ``devices`` sits below ``mediaflow`` and imports nothing
of it, and ``mediaflow`` does not import ``devices`` (DESIGN.md, Layout), so each
layer keeps its own copy of these few lines.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# ``scheme://user:password@``: the userinfo of any URL quoted inside a longer text.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]*@")


def public_url(url: str) -> str:
    """``url`` without its password (the user name stays: it tells which account);
    anything that is not a URL with a password is returned unchanged."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # a port that is not a number: still hide what looks like a password
        return scrub(url)
    if password is None or not parts.scheme:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    netloc = f"{user}@{host}" if user else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def scrub(text: str) -> str:
    """``text`` with every ``scheme://user:password@`` in it reduced to ``scheme://user@``."""
    return _USERINFO.sub(r"\g<scheme>\g<user>@", text)
