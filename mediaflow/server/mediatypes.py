"""Which media types the HTTP service will serve and store.

Stricter than :func:`mediaflow.media.check_media_type`: whitespace is only
space or tab (a CR or LF would end up in a response header), and the
top-level type must be one a browser treats as inert media.
"""

from __future__ import annotations

import re

FALLBACK = "application/octet-stream"

_TOKEN = r"[A-Za-z0-9!#$&^_.+-]+"
# type "/" subtype *( OWS ";" OWS parameter ), RFC 9110 8.3.1; quoted strings without CR/LF/DQUOTE.
_MEDIA_TYPE = re.compile(
    rf"(?P<type>[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{{0,126}})/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{{0,126}}"
    rf'(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|"[^"\r\n\x00]*"))*'
)
MEDIA_TOP_LEVELS = frozenset({"image", "audio", "video"})


def _parse(value: str) -> str | None:
    """The lowercased top-level type of a well-formed media type, else None."""
    if len(value) > 255:
        return None
    matched = _MEDIA_TYPE.fullmatch(value)
    return None if matched is None else matched.group("type").lower()


def _essence(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def servable(value: str) -> bool:
    """``?type=`` values: ``image/*``, ``audio/*``, ``video/*`` or ``application/octet-stream``."""
    top = _parse(value)
    return top in MEDIA_TOP_LEVELS or (top is not None and _essence(value) == FALLBACK)


def storable(value: str) -> bool:
    """Upload ``Content-Type`` values: what :func:`servable` allows, plus ``text/plain``
    (transcripts), which ``nosniff`` keeps a browser from reading as anything else."""
    return servable(value) or (_parse(value) is not None and _essence(value) == "text/plain")


def served_type(recorded: str) -> str:
    """The Content-Type for an artifact's recorded type: itself if storable, else the
    fallback (a type saved from Python, e.g. ``text/html``, is never served as such)."""
    return recorded if storable(recorded) else FALLBACK
